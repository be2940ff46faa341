import { tgError } from '../errors.js';
import { numberReader, numel, type Tensor } from '../tensor/tensor.js';

/**
 * The condition language of workflow branches: a small expression language over tensors, parsed
 * once at registration and evaluated by walking its tree. Nothing in it can call into JavaScript:
 * the only names are tensor references and the functions below.
 *
 *   max(detect.scores) > 0.5          argmax(classify.probabilities) == 3
 *   len(detect.boxes) > 0 and not all(detect.scores < 0.1)
 *
 * Values are numbers or tensors (read as doubles). Arithmetic and comparisons work element-wise
 * on tensors (a tensor against a number, or two tensors of one shape) and give tensors; reduce
 * them with a function. A branch takes a number (non-zero is true) or a one-element tensor.
 * References are `stage.output` or a workflow input's name; names are letters, digits and `_`.
 */

export type Expr =
  | { kind: 'number'; value: number }
  | { kind: 'ref'; stage: string | undefined; tensor: string }
  | { kind: 'call'; fn: FunctionName; args: Expr[] }
  | { kind: 'unary'; op: '-' | 'not'; arg: Expr }
  | { kind: 'binary'; op: BinaryOp; left: Expr; right: Expr };

type BinaryOp = '+' | '-' | '*' | '/' | '==' | '!=' | '<' | '<=' | '>' | '>=' | 'and' | 'or';

/** A tensor as the evaluator sees it: its shape and its elements as doubles. */
export interface ValueTensor {
  shape: number[];
  data: Float64Array;
}
export type Value = number | ValueTensor;

const REDUCTIONS = {
  max: (d: Float64Array) => (d.length ? d.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY) : Number.NaN),
  min: (d: Float64Array) => (d.length ? d.reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY) : Number.NaN),
  sum: (d: Float64Array) => d.reduce((a, b) => a + b, 0),
  mean: (d: Float64Array) => (d.length ? d.reduce((a, b) => a + b, 0) / d.length : Number.NaN),
  argmax: (d: Float64Array) => indexOfBest(d, (a, b) => a > b),
  argmin: (d: Float64Array) => indexOfBest(d, (a, b) => a < b),
  any: (d: Float64Array) => (d.some((v) => v !== 0) ? 1 : 0),
  all: (d: Float64Array) => (d.every((v) => v !== 0) ? 1 : 0),
  /** Elements in all. */
  numel: (d: Float64Array) => d.length,
} as const;

/** Functions of one argument: the reductions, `len` (size of the first dimension) and `abs`. */
export const FUNCTIONS = [...Object.keys(REDUCTIONS), 'len', 'abs'] as const;
type FunctionName = keyof typeof REDUCTIONS | 'len' | 'abs';

function indexOfBest(d: Float64Array, better: (a: number, b: number) => boolean): number {
  if (d.length === 0) return Number.NaN;
  let best = 0;
  for (let i = 1; i < d.length; i++) if (better(d[i] as number, d[best] as number)) best = i;
  return best;
}

// ---- parsing ---------------------------------------------------------------------------------

interface Token {
  type: 'number' | 'name' | 'op' | 'end';
  text: string;
  at: number;
}

const MAX_SOURCE = 2000;
const MAX_DEPTH = 64;

const OPERATORS = ['==', '!=', '<=', '>=', '&&', '||', '<', '>', '+', '-', '*', '/', '(', ')', ',', '.', '!'];
const WORD_OPERATORS = new Set(['and', 'or', 'not']);

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i] as string;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const number = /^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?/.exec(source.slice(i));
    if (number) {
      tokens.push({ type: 'number', text: number[0], at: i });
      i += number[0].length;
      continue;
    }
    const name = /^[A-Za-z_]\w*/.exec(source.slice(i));
    if (name) {
      tokens.push({ type: WORD_OPERATORS.has(name[0]) ? 'op' : 'name', text: name[0], at: i });
      i += name[0].length;
      continue;
    }
    const op = OPERATORS.find((o) => source.startsWith(o, i));
    if (!op) throw syntaxError(source, i, `unexpected "${c}"`);
    tokens.push({ type: 'op', text: op, at: i });
    i += op.length;
  }
  tokens.push({ type: 'end', text: '', at: source.length });
  return tokens;
}

function syntaxError(source: string, at: number, what: string) {
  return tgError('INVALID_WORKFLOW', `condition "${source}": ${what} at character ${at + 1}`, {
    condition: source,
    at,
  });
}

/** Parses a condition; throws INVALID_WORKFLOW naming the character where it went wrong. */
export function parseExpression(source: string): Expr {
  if (source.length > MAX_SOURCE)
    throw syntaxError(source.slice(0, 40), MAX_SOURCE, `longer than ${MAX_SOURCE} characters`);
  const tokens = tokenize(source);
  let pos = 0;
  let depth = 0;
  /** Nesting is bounded so that a hostile definition cannot exhaust the stack. */
  const nested = <T>(at: number, parse: () => T): T => {
    if (++depth > MAX_DEPTH) throw syntaxError(source, at, `nested more than ${MAX_DEPTH} deep`);
    const result = parse();
    depth--;
    return result;
  };
  const peek = () => tokens[pos] as Token;
  const next = () => tokens[pos++] as Token;
  const accept = (...texts: string[]) => {
    const t = peek();
    if (t.type === 'op' && texts.includes(t.text)) {
      pos++;
      return t.text;
    }
    return undefined;
  };
  const expect = (text: string) => {
    const t = next();
    if (t.type !== 'op' || t.text !== text)
      throw syntaxError(source, t.at, `expected "${text}" but found ${t.type === 'end' ? 'the end' : `"${t.text}"`}`);
  };
  // Precedence climbing: or < and < not < comparison < + - < * / < unary minus.
  const binaryLevel =
    (ops: string[], inner: () => Expr, normalize: (op: string) => BinaryOp = (op) => op as BinaryOp) =>
    (): Expr => {
      let left = inner();
      for (let op = accept(...ops); op !== undefined; op = accept(...ops))
        left = { kind: 'binary', op: normalize(op), left, right: inner() };
      return left;
    };
  const primary = (): Expr => {
    const t = next();
    if (t.type === 'number') return { kind: 'number', value: Number(t.text) };
    if (t.type === 'op' && t.text === '(') {
      const inner = nested(t.at, or);
      expect(')');
      return inner;
    }
    if (t.type === 'name') {
      if (t.text === 'true' || t.text === 'false') return { kind: 'number', value: t.text === 'true' ? 1 : 0 };
      if (accept('(')) {
        if (!(FUNCTIONS as readonly string[]).includes(t.text))
          throw syntaxError(source, t.at, `unknown function "${t.text}" (there are ${FUNCTIONS.join(', ')})`);
        const arg = nested(t.at, or);
        if (peek().text === ',') throw syntaxError(source, peek().at, `${t.text}() takes one argument`);
        expect(')');
        return { kind: 'call', fn: t.text as FunctionName, args: [arg] };
      }
      if (accept('.')) {
        const tensor = next();
        if (tensor.type !== 'name') throw syntaxError(source, tensor.at, `expected a tensor name after "${t.text}."`);
        return { kind: 'ref', stage: t.text, tensor: tensor.text };
      }
      return { kind: 'ref', stage: undefined, tensor: t.text };
    }
    throw syntaxError(source, t.at, t.type === 'end' ? 'unexpected end' : `unexpected "${t.text}"`);
  };
  const unary = (): Expr => (accept('-') ? { kind: 'unary', op: '-', arg: nested(peek().at, unary) } : primary());
  const product = binaryLevel(['*', '/'], unary);
  const sum = binaryLevel(['+', '-'], product);
  const comparison = (): Expr => {
    const left = sum();
    const op = accept('==', '!=', '<=', '>=', '<', '>');
    return op ? { kind: 'binary', op: op as BinaryOp, left, right: sum() } : left;
  };
  const negation = (): Expr =>
    accept('not', '!') ? { kind: 'unary', op: 'not', arg: nested(peek().at, negation) } : comparison();
  const and = binaryLevel(['and', '&&'], negation, () => 'and');
  const or = binaryLevel(['or', '||'], and, () => 'or');
  const expr = or();
  const rest = peek();
  if (rest.type !== 'end') throw syntaxError(source, rest.at, `unexpected "${rest.text}"`);
  return expr;
}

/** Every tensor an expression reads, as `stage.tensor` or an input's name. */
export function referencesOf(expr: Expr): { stage: string | undefined; tensor: string }[] {
  switch (expr.kind) {
    case 'number':
      return [];
    case 'ref':
      return [{ stage: expr.stage, tensor: expr.tensor }];
    case 'call':
      return expr.args.flatMap(referencesOf);
    case 'unary':
      return referencesOf(expr.arg);
    case 'binary':
      return [...referencesOf(expr.left), ...referencesOf(expr.right)];
  }
}

// ---- evaluation ------------------------------------------------------------------------------

export function tensorValue(t: Tensor): ValueTensor {
  const read = numberReader(t);
  const data = new Float64Array(numel(t.shape));
  for (let i = 0; i < data.length; i++) data[i] = read(i);
  return { shape: t.shape, data };
}

function evalError(source: string, what: string) {
  return tgError('WORKFLOW_CONDITION_FAILED', `condition "${source}": ${what}`, { condition: source });
}

const ARITHMETIC: Record<Exclude<BinaryOp, 'and' | 'or'>, (a: number, b: number) => number> = {
  '+': (a, b) => a + b,
  '-': (a, b) => a - b,
  '*': (a, b) => a * b,
  '/': (a, b) => a / b,
  '==': (a, b) => (a === b ? 1 : 0),
  '!=': (a, b) => (a !== b ? 1 : 0),
  '<': (a, b) => (a < b ? 1 : 0),
  '<=': (a, b) => (a <= b ? 1 : 0),
  '>': (a, b) => (a > b ? 1 : 0),
  '>=': (a, b) => (a >= b ? 1 : 0),
};

function elementwise(source: string, a: Value, b: Value, f: (x: number, y: number) => number): Value {
  if (typeof a === 'number' && typeof b === 'number') return f(a, b);
  if (typeof a === 'number')
    return { shape: (b as ValueTensor).shape, data: (b as ValueTensor).data.map((y) => f(a, y)) };
  if (typeof b === 'number') return { shape: a.shape, data: a.data.map((x) => f(x, b)) };
  if (a.shape.length !== b.shape.length || a.shape.some((d, i) => d !== b.shape[i]))
    throw evalError(source, `element-wise operation on shapes [${a.shape}] and [${b.shape}]; they must be equal`);
  return { shape: a.shape, data: a.data.map((x, i) => f(x, b.data[i] as number)) };
}

/** A value as a truth: a number, or a tensor of exactly one element. */
function truth(source: string, v: Value): boolean {
  if (typeof v === 'number') return v !== 0 && !Number.isNaN(v);
  if (v.data.length !== 1)
    throw evalError(
      source,
      `a tensor of shape [${v.shape}] is not true or false; reduce it with any(), all(), max() or another function`,
    );
  return (v.data[0] as number) !== 0;
}

/**
 * Evaluates a parsed condition against the tensors produced so far; `lookup` answers a
 * reference (parsing and registration made sure it names a tensor that exists on this path).
 */
export function evaluate(
  source: string,
  expr: Expr,
  lookup: (stage: string | undefined, tensor: string) => Value,
): Value {
  const walk = (e: Expr): Value => {
    switch (e.kind) {
      case 'number':
        return e.value;
      case 'ref':
        return lookup(e.stage, e.tensor);
      case 'call': {
        const arg = walk(e.args[0] as Expr);
        if (e.fn === 'abs')
          return typeof arg === 'number' ? Math.abs(arg) : { shape: arg.shape, data: arg.data.map(Math.abs) };
        if (typeof arg === 'number')
          return e.fn === 'len' || e.fn === 'numel' ? 1 : REDUCTIONS[e.fn](Float64Array.of(arg));
        if (e.fn === 'len') return arg.shape.length === 0 ? 1 : (arg.shape[0] as number);
        return REDUCTIONS[e.fn](arg.data);
      }
      case 'unary': {
        const arg = walk(e.arg);
        if (e.op === 'not') return truth(source, arg) ? 0 : 1;
        return typeof arg === 'number' ? -arg : { shape: arg.shape, data: arg.data.map((x) => -x) };
      }
      case 'binary':
        if (e.op === 'and') return truth(source, walk(e.left)) && truth(source, walk(e.right)) ? 1 : 0;
        if (e.op === 'or') return truth(source, walk(e.left)) || truth(source, walk(e.right)) ? 1 : 0;
        return elementwise(source, walk(e.left), walk(e.right), ARITHMETIC[e.op]);
    }
  };
  return walk(expr);
}

/** Evaluates a branch condition to true or false. */
export function evaluateCondition(
  source: string,
  expr: Expr,
  lookup: (stage: string | undefined, tensor: string) => Value,
): boolean {
  return truth(source, evaluate(source, expr, lookup));
}
