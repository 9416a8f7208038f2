'use strict';
/*
 * The azure tests' fault proxy: an HTTP proxy on 127.0.0.1 in front of one
 * Azurite blob service, in a node process of its own (Node's standard
 * library only), driven by tests/integration/azurefixture.py (FaultProxy).
 *
 *     node proxy.js --upstream-port P [--port P] [--seed N]
 *
 * It prints {"port": P, "control_port": C, "pid": N} on stdout when ready
 * and exits 0 on SIGTERM. Both ports are on 127.0.0.1.
 *
 * Every request on the proxy port is counted (per method), checked for its
 * date (x-ms-date more than 15 minutes off the proxy's clock, moved by
 * clock_offset seconds, is answered 403 AuthenticationFailed, as Azure
 * does), held delay_ms, and given a fault with the chance `rate`, of a kind
 * picked uniformly from `kinds` by a seeded generator:
 *   "503"      ServerBusy with Retry-After: 1, nothing forwarded
 *   "500"      InternalError, nothing forwarded
 *   "reset"    the connection closed before the request is forwarded
 *   "lost"     forwarded and carried out, then the connection closed
 *              without an answer
 *   "truncate" (GETs only) the headers with the full Content-Length, half
 *              the body, then the connection closed
 *   "stall"    forwarded and carried out, then nothing more is sent - for a
 *              GET with a body after the headers and half the body - until
 *              the client closes the connection or stall_max_s pass
 * Everything else is forwarded as it came (the SharedKey signature covers
 * no Host) on kept-alive connections, and the answer streamed back.
 *
 * The control port: GET /control answers the state, {"rate", "kinds",
 * "delay_ms", "clock_offset", "stall_max_s", "requests" (per method),
 * "total", "faults" (per kind)}; POST /control with a JSON object sets the
 * fields given of rate, kinds, delay_ms, clock_offset, stall_max_s and seed,
 * and with "reset_counters": true zeroes the counts; it answers the new
 * state, or 400 {"error"} for an unknown field or a bad value.
 */

const http = require('http');

const KINDS = ['503', '500', 'reset', 'lost', 'truncate', 'stall'];
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'proxy-connection', 'upgrade', 'te', 'trailer']);

function usage(msg) {
  process.stderr.write(`proxy.js: ${msg}\nusage: node proxy.js --upstream-port P [--port P] [--seed N]\n`);
  process.exit(2);
}

const opts = { upstreamPort: 0, port: 0, seed: 1 };
for (let i = 2; i < process.argv.length; i++) {
  const arg = process.argv[i];
  const val = () => {
    const v = process.argv[++i];
    if (v === undefined || !/^\d+$/.test(v)) usage(`${arg} needs a number`);
    return Number(v);
  };
  switch (arg) {
    case '--upstream-port': opts.upstreamPort = val(); break;
    case '--port': opts.port = val(); break;
    case '--seed': opts.seed = val(); break;
    default: usage(`unknown argument ${arg}`);
  }
}
if (!opts.upstreamPort) usage('--upstream-port is required');

// mulberry32: seedable, so that a test can replay a run of faults
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const settings = { rate: 0, kinds: ['503'], delay_ms: 0, clock_offset: 0, stall_max_s: 30 };
let random = generator(opts.seed);
let counts = { requests: {}, total: 0, faults: Object.fromEntries(KINDS.map(k => [k, 0])) };
const held = new Set(); // stalled sockets, closed at exit
const upstream = new http.Agent({ keepAlive: true, maxSockets: Infinity });

function state() {
  return { ...settings, requests: { ...counts.requests }, total: counts.total, faults: { ...counts.faults } };
}

function pick(method) {
  counts.total++;
  counts.requests[method] = (counts.requests[method] || 0) + 1;
  if (random() >= settings.rate) return null;
  const kinds = settings.kinds.filter(k => k !== 'truncate' || method === 'GET');
  if (kinds.length === 0) return null;
  const kind = kinds[Math.floor(random() * kinds.length)];
  counts.faults[kind]++;
  return kind;
}

function errorDoc(code, message) {
  return `<?xml version="1.0" encoding="utf-8"?><Error><Code>${code}</Code><Message>${message}\nRequestId:0</Message></Error>`;
}

function answerError(req, res, status, code, message, extra) {
  const doc = Buffer.from(errorDoc(code, message));
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': doc.length, 'x-ms-error-code': code, ...extra });
  res.end(req.method === 'HEAD' ? undefined : doc);
}

// Sends nothing more on the socket until the client closes it, stall_max_s
// pass or the proxy stops; then closes it.
function hold(socket) {
  held.add(socket);
  const timer = setTimeout(() => socket.destroy(), settings.stall_max_s * 1000);
  socket.once('close', () => {
    clearTimeout(timer);
    held.delete(socket);
  });
  socket.resume(); // reads on, so that the client's close is seen
}

// Closes the connection once what was written has gone (a FIN, not a reset).
function hangUp(socket) {
  socket.end(() => socket.destroy());
}

function readAll(stream, done) {
  const parts = [];
  stream.on('data', d => parts.push(d));
  stream.on('end', () => done(Buffer.concat(parts)));
}

function outHeaders(upRes) {
  const out = {};
  for (const [k, v] of Object.entries(upRes.headers)) if (!HOP.has(k)) out[k] = v;
  return out;
}

function forward(req, res, kind) {
  const headers = {};
  for (const [k, v] of Object.entries(req.headers)) if (!HOP.has(k)) headers[k] = v;
  const up = http.request({ host: '127.0.0.1', port: opts.upstreamPort, method: req.method, path: req.url, headers, agent: upstream });
  up.on('error', () => req.socket.destroy()); // the service is gone: no answer
  req.on('aborted', () => up.destroy());
  up.on('response', upRes => {
    if (kind === null) {
      res.writeHead(upRes.statusCode, upRes.statusMessage, outHeaders(upRes));
      upRes.pipe(res);
      upRes.on('aborted', () => res.destroy());
      return;
    }
    readAll(upRes, body => {
      const socket = req.socket;
      if (kind === 'lost') return socket.destroy();
      const withBody = req.method === 'GET' && body.length >= 2;
      if (kind === 'stall' && !withBody) return hold(socket);
      if (kind === 'truncate' && body.length <= 1) {
        res.writeHead(upRes.statusCode, upRes.statusMessage, outHeaders(upRes));
        return res.end(body);
      }
      res.writeHead(upRes.statusCode, upRes.statusMessage, outHeaders(upRes));
      res.write(body.subarray(0, body.length >> 1), () => (kind === 'stall' ? hold(socket) : hangUp(socket)));
    });
  });
  req.pipe(up);
}

function tooOld(req) {
  const stamp = req.headers['x-ms-date']; // a SAS request may carry none
  if (!stamp) return false;
  const when = Date.parse(stamp);
  return !Number.isNaN(when) && Math.abs(Date.now() + settings.clock_offset * 1000 - when) > 15 * 60 * 1000;
}

const proxy = http.createServer((req, res) => {
  if (tooOld(req)) {
    return answerError(req, res, 403, 'AuthenticationFailed', `Request date header too old: '${req.headers['x-ms-date']}'`);
  }
  const kind = pick(req.method);
  const go = () => {
    if (kind === '503') return answerError(req, res, 503, 'ServerBusy', 'injected by the test proxy', { 'Retry-After': '1' });
    if (kind === '500') return answerError(req, res, 500, 'InternalError', 'injected by the test proxy');
    if (kind === 'reset') return readAll(req, () => hangUp(req.socket));
    forward(req, res, kind);
  };
  if (settings.delay_ms > 0) {
    req.pause();
    setTimeout(go, settings.delay_ms);
  } else {
    go();
  }
});
proxy.keepAliveTimeout = 600 * 1000; // as long as a client keeps it, like the service
proxy.headersTimeout = 0;
proxy.requestTimeout = 0;

const CHECKS = {
  rate: v => typeof v === 'number' && v >= 0 && v <= 1,
  kinds: v => Array.isArray(v) && v.every(k => KINDS.includes(String(k))),
  delay_ms: v => Number.isInteger(v) && v >= 0,
  clock_offset: v => typeof v === 'number' && Number.isFinite(v),
  stall_max_s: v => typeof v === 'number' && v > 0,
  seed: v => Number.isInteger(v) && v >= 0,
  reset_counters: v => typeof v === 'boolean',
};

function control(change) {
  if (change === null || typeof change !== 'object' || Array.isArray(change)) return 'a JSON object is needed';
  for (const [k, v] of Object.entries(change)) {
    if (!(k in CHECKS)) return `unknown field ${k}`;
    if (!CHECKS[k](v)) return `bad value for ${k}`;
  }
  for (const [k, v] of Object.entries(change)) {
    if (k === 'seed') random = generator(v);
    else if (k === 'reset_counters') {
      if (v) counts = { requests: {}, total: 0, faults: Object.fromEntries(KINDS.map(q => [q, 0])) };
    } else settings[k] = k === 'kinds' ? v.map(String) : v;
  }
  return null;
}

const controlServer = http.createServer((req, res) => {
  const reply = (status, obj) => {
    const body = Buffer.from(JSON.stringify(obj));
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  };
  if (req.url !== '/control') return reply(404, { error: 'not found' });
  if (req.method === 'GET') return reply(200, state());
  if (req.method !== 'POST') return reply(405, { error: 'GET or POST' });
  readAll(req, body => {
    let change;
    try {
      change = JSON.parse(body.toString('utf8'));
    } catch (e) {
      return reply(400, { error: 'bad JSON' });
    }
    const err = control(change);
    return err ? reply(400, { error: err }) : reply(200, state());
  });
});

process.on('SIGTERM', () => {
  for (const s of held) s.destroy();
  proxy.close();
  controlServer.close();
  upstream.destroy();
  process.exit(0);
});

proxy.listen(opts.port, '127.0.0.1', () => {
  controlServer.listen(0, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({ port: proxy.address().port, control_port: controlServer.address().port, pid: process.pid }) + '\n');
  });
});
