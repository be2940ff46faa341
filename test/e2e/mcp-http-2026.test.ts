import { defineMcpSuite } from './mcp-suite.js';

// The 2026-07-28 revision: no session, a server of its own for every request.
defineMcpSuite('http-2026');
