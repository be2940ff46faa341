import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { serverBase } from '../../../src/cli/top.js';

describe('serverBase', () => {
  it('takes the base, the MCP endpoint or host:port, and gives the base', () => {
    assert.equal(serverBase('http://127.0.0.1:8765'), 'http://127.0.0.1:8765');
    assert.equal(serverBase('http://127.0.0.1:8765/'), 'http://127.0.0.1:8765');
    assert.equal(serverBase('http://127.0.0.1:8765/mcp'), 'http://127.0.0.1:8765');
    assert.equal(serverBase('http://127.0.0.1:8765/mcp/'), 'http://127.0.0.1:8765');
    assert.equal(serverBase('localhost:9000'), 'http://localhost:9000');
    assert.equal(serverBase('https://models.example.com/tensorgate/mcp'), 'https://models.example.com/tensorgate');
  });
});
