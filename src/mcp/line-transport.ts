import type { Readable, Writable } from 'node:stream';
import {
  deserializeMessage,
  type JSONRPCMessage,
  serializeMessage,
  type Transport,
} from '@modelcontextprotocol/server';

/**
 * Newline-delimited JSON-RPC over a pair of streams (MCP's stdio binding), built for large
 * messages. The SDK's own stdio transport concatenates its whole buffer on every incoming chunk
 * and scans it again from the start for the newline, so an 800 KB tool call costs quadratic
 * copying; here each chunk is scanned once and a message is joined once, when its newline arrives.
 * Parsing and validation are the SDK's own (`deserializeMessage`).
 */

export const DEFAULT_MAX_MESSAGE_BYTES = 512 * 1024 * 1024;

export class LineTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private parts: Buffer[] = [];
  private pendingBytes = 0;
  private closed = false;

  constructor(
    private readonly input: Readable,
    private readonly output: Writable,
    private readonly maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES,
  ) {}

  async start(): Promise<void> {
    this.input.on('data', this.onData);
    this.input.on('error', this.onStreamError);
    this.input.on('end', this.onEnd);
    this.input.on('close', this.onEnd);
    this.output.on('error', this.onStreamError);
  }

  send(message: JSONRPCMessage): Promise<void> {
    if (this.closed) return Promise.reject(new Error('transport is closed'));
    return new Promise((resolve, reject) => {
      const ok = this.output.write(serializeMessage(message), (err) => (err ? reject(err) : undefined));
      if (ok) resolve();
      else this.output.once('drain', () => resolve());
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.input.off('data', this.onData);
    this.input.off('error', this.onStreamError);
    this.input.off('end', this.onEnd);
    this.input.off('close', this.onEnd);
    this.output.off('error', this.onStreamError);
    this.input.pause();
    this.parts = [];
    this.onclose?.();
  }

  private readonly onData = (chunk: Buffer): void => {
    let start = 0;
    let newline = chunk.indexOf(10);
    while (newline !== -1) {
      this.parts.push(chunk.subarray(start, newline));
      const line = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts);
      this.parts = [];
      this.pendingBytes = 0;
      this.deliver(line);
      start = newline + 1;
      newline = chunk.indexOf(10, start);
    }
    if (start < chunk.length) {
      this.pendingBytes += chunk.length - start;
      if (this.pendingBytes > this.maxMessageBytes) {
        this.parts = [];
        this.pendingBytes = 0;
        this.onerror?.(new Error(`a message exceeded ${this.maxMessageBytes} bytes; it was dropped`));
        return;
      }
      this.parts.push(start === 0 ? chunk : chunk.subarray(start));
    }
  };

  private deliver(line: Buffer): void {
    const end = line.length > 0 && line[line.length - 1] === 13 ? line.length - 1 : line.length;
    if (end === 0) return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(line.toString('utf8', 0, end));
    } catch (err) {
      this.onerror?.(err as Error);
      return;
    }
    this.onmessage?.(message);
  }

  private readonly onStreamError = (error: Error): void => {
    this.onerror?.(error);
  };

  private readonly onEnd = (): void => {
    void this.close();
  };
}
