import { defineMcpSuite } from './mcp-suite.js';

defineMcpSuite('http');
