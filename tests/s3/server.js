#!/usr/bin/env node
'use strict';
/*
 * The S3 backend's test server: s3rver (a real S3 implementation on the
 * local file system) in this process, behind an HTTP proxy that does what
 * s3rver does not:
 *
 *   - checks every request's AWS SigV4 signature (s3rver 3 accepts any v4
 *     signature), with @smithy/signature-v4 and the secret of the access key
 *     the Authorization header names: the main key pair, or a temporary key
 *     this server issued (which also needs its x-amz-security-token);
 *   - checks x-amz-content-sha256 against the body;
 *   - implements `If-None-Match: *` on PUT (412 PreconditionFailed), unless
 *     told to ignore it ("conditional_writes": false, as some S3-compatible
 *     stores do);
 *   - injects faults (503 SlowDown, 500 InternalError, connection resets,
 *     stalls, truncated bodies, answers lost after the request was carried
 *     out) and latency, and can play "server gone";
 *   - stands in for Cloudflare's R2 temporary credentials API.
 *
 * Usage:
 *   node server.js --data DIR [--bucket NAME]... [--region R]... [--min-ttl S]
 *                  [--account-id ID] [--s3-port P]
 *   environment: S3FIX_ACCESS_KEY, S3FIX_SECRET_KEY (the main key pair) and
 *   S3FIX_API_TOKEN (the bearer token of the credentials API); the same
 *   names as options (--access-key, --secret-key, --api-token) also work.
 *
 * When ready it prints one JSON line on stdout:
 *   {"s3_port": P, "control_port": C, "pid": N}
 * and serves
 *   127.0.0.1:P   S3 (path style), through the checks above to s3rver;
 *   127.0.0.1:C   GET /control (counters and settings, JSON), POST /control
 *                 (change settings, JSON), and the credentials API:
 *                 POST /client/v4/accounts/ID/r2/temp-access-credentials.
 * The credentials API is on the control port so that faults and "down" on
 * the S3 port leave it alone (as they are different services at Cloudflare);
 * its own failures are set with "api_fault" and "api_down".
 *
 * Request bodies are read completely before anything is forwarded: the
 * payload hash must be checked before s3rver stores a byte, and s3rver
 * writes objects in place, so a client that dies in the middle of an upload
 * would otherwise leave a partial object that real S3 never shows. Response
 * bodies are streamed, except under a body fault (reset, stall, truncate),
 * which needs the whole body to cut it in the middle.
 *
 * SIGTERM (or SIGINT) closes everything and exits 0. Rejections are logged on
 * stderr with the canonical request the server computed; secrets never are.
 */

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const path = require('path');

// s3rver lists objects by walking the bucket directory and stat()ing every
// entry; an object deleted between readdir and stat failed the whole list
// with a 500 that real S3 never gives. Entries that vanish are skipped. This
// must be patched before s3rver's store module takes its own reference.
const s3rverUtils = require('s3rver/lib/utils');
s3rverUtils.walk = function* walk(dir, recurseFilter) {
  let names;
  try {
    names = fs.readdirSync(dir);
  } catch (err) {
    if (err.code === 'ENOENT') return;
    throw err;
  }
  for (const name of names) {
    const filePath = path.posix.join(dir, name);
    let st;
    try {
      st = fs.statSync(filePath);
    } catch (err) {
      if (err.code === 'ENOENT') continue;
      throw err;
    }
    if (!st.isDirectory()) yield filePath;
    else if (!recurseFilter || recurseFilter(filePath)) yield* walk(filePath, recurseFilter);
  }
};

// s3rver encrypts its continuation tokens with single DES, which OpenSSL 3
// (and so Node 17 and later) no longer offers: every truncated listing
// answered 500. The tokens only have to round-trip through s3rver itself,
// so DES is swapped for AES-128-CBC with the key and the 8-byte IV doubled.
for (const name of ['createCipheriv', 'createDecipheriv']) {
  const original = crypto[name];
  crypto[name] = function (algorithm, key, iv, ...rest) {
    if (algorithm === 'des' && key.length === 8 && iv.length === 8)
      return original.call(crypto, 'aes-128-cbc', Buffer.concat([key, key]), Buffer.concat([iv, iv]), ...rest);
    return original.call(crypto, algorithm, key, iv, ...rest);
  };
}

const S3rver = require('s3rver');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
const { SignatureV4, getCanonicalHeaders } = require('@smithy/signature-v4');
const { Hash } = require('@smithy/hash-node');
const { HttpRequest } = require('@smithy/protocol-http');

// ---------------------------------------------------------------- options

function parseArgs(argv) {
  const opts = {
    data: null,
    buckets: [],
    regions: [],
    minTtl: 1,
    s3Port: 0,
    accountId: 'cairn-test-account',
    accessKey: process.env.S3FIX_ACCESS_KEY || null,
    secretKey: process.env.S3FIX_SECRET_KEY || null,
    apiToken: process.env.S3FIX_API_TOKEN || null,
  };
  for (let i = 2; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    switch (arg) {
      case '--data': opts.data = value(); break;
      case '--bucket': opts.buckets.push(value()); break;
      case '--region': opts.regions.push(value()); break;
      case '--min-ttl': opts.minTtl = Number(value()); break;
      case '--account-id': opts.accountId = value(); break;
      case '--s3-port': opts.s3Port = Number(value()); break;
      case '--access-key': opts.accessKey = value(); break;
      case '--secret-key': opts.secretKey = value(); break;
      case '--api-token': opts.apiToken = value(); break;
      default: usage(`unknown argument ${arg}`);
    }
  }
  if (!opts.data) usage('--data DIR is required');
  if (!opts.accessKey || !opts.secretKey) usage('the main key pair is required (S3FIX_ACCESS_KEY, S3FIX_SECRET_KEY)');
  if (!opts.apiToken) opts.apiToken = crypto.randomBytes(16).toString('hex');
  if (opts.regions.length === 0) opts.regions = ['us-east-1', 'auto'];
  if (!Number.isFinite(opts.minTtl) || opts.minTtl < 0) usage('--min-ttl wants seconds');
  if (!Number.isInteger(opts.s3Port) || opts.s3Port < 0 || opts.s3Port > 65535) usage('--s3-port wants a port');
  return opts;
}

function usage(msg) {
  process.stderr.write(`server.js: ${msg}\n`);
  process.exit(2);
}

const opts = parseArgs(process.argv);
const storeDir = path.join(path.resolve(opts.data), 'store');
const tmpDir = path.join(path.resolve(opts.data), 'tmp');
fs.mkdirSync(storeDir, { recursive: true });
fs.mkdirSync(tmpDir, { recursive: true });

function log(msg) {
  process.stderr.write(`[s3fix ${new Date().toISOString()}] ${msg}\n`);
}

// s3rver 3.7 answers a PUT before the object's file is completely written
// (it resolves when its hashing stream ends, not when the file is closed),
// and writes the object in place. A GET right after the PUT could then read a
// short object, which real S3 never returns. Objects are written to a
// temporary file beside the store and renamed into place once closed.
// s3rver's listing walks directories in readdir order, so its pages are not
// in key order and a page cut at max-keys skips keys; it also fails the whole
// listing when one object's metadata is missing mid-write. This listing
// collects every key under the prefix, sorts them as S3 does (by UTF-8
// bytes), and skips objects that vanish while it runs. It walks only the
// directories that can hold such keys: a listing costs what is under its
// prefix, as on S3, not what the rest of the bucket holds (a walk of the
// whole bucket made every LIST of a small prefix slower with each object
// stored elsewhere in it).
const S3Object = require('s3rver/lib/models/object');
const OBJECT_SUFFIX = '._S3rver_object';
FilesystemStore.prototype.listObjects = async function listObjects(bucket, options) {
  const { delimiter = '', startAfter = '', prefix = '', maxKeys = Infinity } = options;
  const bucketPath = this.getBucketPath(bucket);
  const keys = [];
  const commonPrefixes = new Set();
  const underPrefix = (dirPath) => {
    const dir = dirPath.slice(bucketPath.length + 1) + '/';
    return dir.startsWith(prefix) || prefix.startsWith(dir);
  };
  for (const filePath of s3rverUtils.walk(bucketPath, underPrefix)) {
    if (!filePath.endsWith(OBJECT_SUFFIX)) continue;
    const key = filePath.slice(bucketPath.length + 1, -OBJECT_SUFFIX.length);
    if (!key.startsWith(prefix)) continue;
    keys.push(key);
  }
  keys.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const picked = [];
  let isTruncated = false;
  for (const key of keys) {
    if (Buffer.compare(Buffer.from(key), Buffer.from(startAfter)) <= 0) continue;
    if (delimiter) {
      const idx = key.slice(prefix.length).indexOf(delimiter);
      if (idx !== -1) {
        commonPrefixes.add(key.slice(0, prefix.length + idx + 1));
        continue;
      }
    }
    if (picked.length >= maxKeys) {
      isTruncated = true;
      break;
    }
    picked.push(key);
  }
  const objects = [];
  for (const key of picked) {
    let metadata;
    try {
      metadata = await this.getMetadata(bucket, key);
    } catch (err) {
      if (err.code === 'ENOENT') continue;
      throw err;
    }
    objects.push(new S3Object(bucket, key, null, metadata));
  }
  return { objects, commonPrefixes: [...commonPrefixes].sort(), isTruncated };
};

// s3rver removes a deleted object's empty directories, racing with a PUT that
// has just created one (its rename then fails) and with another delete (its
// readdir then fails): both answered 500. Directories stay.
FilesystemStore.prototype.deleteObject = async function deleteObject(bucket, key) {
  for (const what of ['object', 'object.md5', 'metadata.json']) {
    await fs.promises.unlink(this.getResourcePath(bucket, key, what)).catch(err => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
};

FilesystemStore.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await fs.promises.mkdir(path.dirname(objectPath), { recursive: true });
  const tmpPath = path.join(tmpDir, crypto.randomBytes(8).toString('hex'));
  const md5Context = crypto.createHash('md5');
  let size = 0;
  await new Promise((resolve, reject) => {
    const out = fs.createWriteStream(tmpPath);
    out.on('error', reject);
    out.on('close', resolve);
    const feed = chunk => {
      md5Context.update(chunk);
      size += chunk.length;
    };
    if (Buffer.isBuffer(object.content)) {
      feed(object.content);
      out.end(object.content);
      return;
    }
    object.content.on('error', err => {
      out.destroy();
      reject(err);
    });
    object.content.on('data', feed);
    object.content.pipe(out);
  }).catch(async err => {
    await fs.promises.rm(tmpPath, { force: true });
    throw err;
  });
  // The object's file appears last, whole, after its metadata: a kill -9
  // of this server at any moment leaves either no object or a whole one
  // (s3rver fails every read of an object whose metadata file is torn).
  const md5 = md5Context.digest('hex');
  await this.putMetadata(object.bucket, object.key, object.metadata, md5);
  await fs.promises.rename(tmpPath, objectPath);
  return { size, md5 };
};

FilesystemStore.prototype.putMetadata = async function putMetadata(bucket, key, metadata, md5) {
  // as s3rver's own, but each file written beside the store and renamed into place
  const json = {};
  for (const [k, v] of Object.entries(metadata || {}))
    if (S3Object.ALLOWED_METADATA.includes(k) || k.startsWith('x-amz-meta-')) json[k] = v;
  const files = [['metadata.json', JSON.stringify(json, null, 2)]];
  if (md5) files.unshift(['object.md5', md5]);
  await fs.promises.mkdir(path.dirname(this.getResourcePath(bucket, key, 'object')), { recursive: true });
  for (const [what, text] of files) {
    const tmpPath = path.join(tmpDir, crypto.randomBytes(8).toString('hex'));
    await fs.promises.writeFile(tmpPath, text);
    await fs.promises.rename(tmpPath, this.getResourcePath(bucket, key, what));
  }
};

// ---------------------------------------------------------------- state

const LATENCY_PROFILES = { clean: 0, rtt20: 20, rtt50: 50, rtt100: 100 };
// lost: the request is carried out, and then no byte of the answer comes
// (the client gives up not knowing that it happened: an orphan write).
const FAULT_KINDS = ['503', '500', 'reset', 'reset_request', 'stall', 'truncate', 'lost'];

// Settings changed by POST /control; see CONTROL_DOC below.
const settings = {
  fault_rate: 0,
  faults: ['503'],
  fault_methods: null, // null: every method
  fault_limit: null, // null: no limit; a number: faults left to inject
  fault_path: null, // null: every request; a string: only requests whose path contains it
  retry_after: null,
  stall_max_s: 120,
  latency: 'clean',
  latency_ms: 0,
  down: false,
  down_mode: 'refuse',
  min_ttl: opts.minTtl,
  temp_ttl_cap: null,
  api_down: false,
  api_fault: null,
  seed: null,
  conditional_writes: true, // false: If-None-Match is ignored, as some S3-compatible stores do
  temp_token_bytes: 48, // random bytes in a session token the credentials API issues (base64)
};

function freshCounters() {
  return {
    requests: {}, // every request on the S3 port, by method
    requests_total: 0,
    forwarded: {}, // requests passed to s3rver, by method
    rejected: {}, // by S3 error code
    faults: {}, // injected faults, by kind
    faults_total: 0,
    precondition_failed: 0,
    temp_credentials_issued: 0,
    temp_credentials_refused: 0,
    connections_refused: 0,
    bytes_in: 0,
    bytes_out: 0,
    in_flight_max: 0, // most requests on the S3 port at one time (read-ahead shows here)
  };
}
let counters = freshCounters();
let inFlight = 0;
const recent = []; // the last RECENT_MAX requests: method, path, status, fault
const RECENT_MAX = 500;

function bump(map, key, n = 1) {
  map[key] = (map[key] || 0) + n;
}

function note(entry) {
  recent.push(entry);
  if (recent.length > RECENT_MAX) recent.shift();
}

// A seedable generator (mulberry32) so that a test can replay a fault
// sequence; Math.random until a seed is set.
let rngState = null;
function random() {
  if (rngState === null) return Math.random();
  rngState = (rngState + 0x6d2b79f5) >>> 0;
  let t = rngState;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

// Temporary keys: accessKeyId -> {secret, token, expires (ms), bucket,
// prefixes, permission}
const tempKeys = new Map();

// ---------------------------------------------------------------- S3 errors

function xmlEscape(s) {
  return String(s).replace(/[<>&'"]/g, c => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' }[c]));
}

function s3Error(res, status, code, message, extra = {}, headers = {}) {
  const body =
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error>' +
    `<Code>${xmlEscape(code)}</Code><Message>${xmlEscape(message)}</Message>` +
    Object.entries(extra).map(([k, v]) => `<${k}>${xmlEscape(v)}</${k}>`).join('') +
    `<RequestId>${crypto.randomBytes(8).toString('hex').toUpperCase()}</RequestId></Error>`;
  const buf = Buffer.from(body);
  res.writeHead(status, {
    'Content-Type': 'application/xml',
    'Content-Length': buf.length,
    'x-amz-request-id': crypto.randomBytes(8).toString('hex').toUpperCase(),
    ...headers,
  });
  res.end(buf);
  counters.bytes_out += buf.length;
}

class Rejection extends Error {
  constructor(status, code, message, canonical) {
    super(message);
    this.status = status;
    this.code = code;
    this.canonical = canonical;
  }
}

// ---------------------------------------------------------------- SigV4

const UNRESERVED = /[A-Za-z0-9\-._~]/;

// The raw request target split into path and query, both percent-decoded to
// bytes. Malformed escapes are a client error.
function percentDecode(s, what) {
  const out = [];
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '%') {
      const hex = s.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new Rejection(400, 'InvalidURI', `malformed percent escape in the ${what}`);
      out.push(parseInt(hex, 16));
      i += 2;
    } else {
      for (const b of Buffer.from(c, 'utf8')) out.push(b);
    }
  }
  return Buffer.from(out);
}

// S3's canonical URI: the path decoded once and encoded once, every byte
// but the unreserved ones and '/' as %XX. S3 does not normalise '.', '..' or
// empty segments. A client that sends a key encoded the AWS way gets its raw
// path back; one that leaves '=' or ':' unencoded but signs it so, or that
// encodes twice, does not match (as with AWS: curl issue #13754).
function canonicalUri(bytes) {
  let out = '';
  for (const b of bytes) {
    const c = String.fromCharCode(b);
    out += b < 0x80 && (UNRESERVED.test(c) || c === '/') ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

// The query as smithy wants it: decoded names and values (strings, arrays for
// repeated names). '+' is a literal plus, as in S3's own canonicalisation.
function parseQuery(raw) {
  const query = {};
  if (!raw) return query;
  for (const part of raw.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = percentDecode(eq < 0 ? part : part.slice(0, eq), 'query').toString('utf8');
    const value = eq < 0 ? '' : percentDecode(part.slice(eq + 1), 'query').toString('utf8');
    if (name in query) query[name] = [].concat(query[name], value);
    else query[name] = value;
  }
  return query;
}

function parseAuthorization(header) {
  const m = /^AWS4-HMAC-SHA256\s+(.*)$/.exec(header || '');
  if (!m) return null;
  const fields = {};
  for (const part of m[1].split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) return null;
    fields[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  if (!fields.Credential || !fields.SignedHeaders || !fields.Signature) return null;
  const cred = fields.Credential.split('/');
  if (cred.length !== 5) return null;
  return {
    accessKeyId: cred[0],
    date: cred[1],
    region: cred[2],
    service: cred[3],
    terminator: cred[4],
    signedHeaders: fields.SignedHeaders.split(';'),
    signature: fields.Signature,
  };
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  if (!m) return null;
  return new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
}

function secretFor(accessKeyId) {
  if (accessKeyId === opts.accessKey) return { secret: opts.secretKey, temp: null };
  const temp = tempKeys.get(accessKeyId);
  if (temp) return { secret: temp.secret, temp };
  return null;
}

// Checks the request's signature and payload hash; returns the key's record
// ({secret, temp}) or throws a Rejection.
async function verify(req, target, body) {
  const auth = parseAuthorization(req.headers.authorization);
  if (!req.headers.authorization) throw new Rejection(403, 'AccessDenied', 'Anonymous access is not allowed');
  if (!auth) throw new Rejection(400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed');
  const key = secretFor(auth.accessKeyId);
  if (!key) throw new Rejection(403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.');
  if (auth.service !== 's3' || auth.terminator !== 'aws4_request')
    throw new Rejection(400, 'AuthorizationHeaderMalformed', `bad credential scope service ${auth.service}`);
  if (!opts.regions.includes(auth.region))
    throw new Rejection(400, 'AuthorizationHeaderMalformed', `the region '${auth.region}' is wrong; expecting one of ${opts.regions.join(', ')}`);

  const amzDate = req.headers['x-amz-date'];
  const when = parseAmzDate(amzDate);
  if (!when) throw new Rejection(403, 'AccessDenied', 'AWS authentication requires a valid x-amz-date header');
  if (auth.date !== amzDate.slice(0, 8))
    throw new Rejection(403, 'SignatureDoesNotMatch', 'the credential scope date is not the date of x-amz-date');
  if (Math.abs(Date.now() - when.getTime()) > 15 * 60 * 1000)
    throw new Rejection(403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.');

  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!payloadHash) throw new Rejection(400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256');
  if (payloadHash.startsWith('STREAMING-'))
    throw new Rejection(501, 'NotImplemented', `this test server does not take ${payloadHash} bodies`);
  if (payloadHash !== 'UNSIGNED-PAYLOAD') {
    if (!/^[0-9a-f]{64}$/.test(payloadHash)) throw new Rejection(400, 'InvalidArgument', 'x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a lowercase SHA-256');
    const actual = crypto.createHash('sha256').update(body).digest('hex');
    if (actual !== payloadHash)
      throw new Rejection(400, 'XAmzContentSHA256Mismatch', `The provided 'x-amz-content-sha256' header does not match what was computed (${actual}).`);
  }

  const signed = new Set(auth.signedHeaders);
  if (!signed.has('host')) throw new Rejection(403, 'AccessDenied', 'the host header must be signed');
  for (const name of Object.keys(req.headers)) {
    if (name.startsWith('x-amz-') && !signed.has(name))
      throw new Rejection(403, 'AccessDenied', `There were headers present in the request which were not signed: ${name}`);
  }
  const headers = {};
  for (const name of auth.signedHeaders) {
    if (req.headers[name] === undefined) throw new Rejection(403, 'SignatureDoesNotMatch', `the signed header ${name} is missing`);
    headers[name] = String(req.headers[name]);
  }

  if (key.temp) {
    const token = req.headers['x-amz-security-token'];
    if (token === undefined) throw new Rejection(403, 'InvalidAccessKeyId', 'a temporary access key needs its x-amz-security-token');
    if (token !== key.temp.token) throw new Rejection(400, 'InvalidToken', 'The provided token is malformed or otherwise invalid.');
    if (Date.now() >= key.temp.expires) throw new Rejection(400, 'ExpiredToken', 'The provided token has expired.');
  }

  const request = new HttpRequest({
    method: req.method,
    protocol: 'http:',
    hostname: '127.0.0.1',
    path: canonicalUri(target.pathBytes),
    query: target.query,
    headers,
  });
  const signer = new SignatureV4({
    credentials: { accessKeyId: auth.accessKeyId, secretAccessKey: key.secret, sessionToken: key.temp ? key.temp.token : undefined },
    region: auth.region,
    service: 's3',
    sha256: Hash.bind(null, 'sha256'),
    uriEscapePath: false, // the path above is S3's canonical URI already
    applyChecksum: false,
  });
  const signedReq = await signer.sign(request, { signingDate: when, signableHeaders: signed });
  const expected = /Signature=([0-9a-f]+)/.exec(signedReq.headers.authorization)[1];
  const given = Buffer.from(auth.signature);
  if (given.length !== expected.length || !crypto.timingSafeEqual(given, Buffer.from(expected))) {
    // the header list is the client's, so only the canonical request differs
    const canonical = signer.createCanonicalRequest(signedReq, getCanonicalHeaders(signedReq, undefined, signed), payloadHash);
    throw new Rejection(403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
      canonical);
  }
  return key;
}

// Temporary keys are scoped to a bucket and optionally key prefixes; an
// object-read-only key may only read.
function checkScope(req, key, bucket, objectKey, query) {
  const temp = key.temp;
  if (!temp) return;
  const deny = why => {
    throw new Rejection(403, 'AccessDenied', `Access Denied (temporary credentials: ${why})`);
  };
  if (!bucket || bucket !== temp.bucket) deny(`bucket ${bucket || '(none)'} is not ${temp.bucket}`);
  const writes = !['GET', 'HEAD'].includes(req.method);
  if (writes && temp.permission.endsWith('read-only')) deny('read-only');
  if (temp.prefixes.length === 0) return;
  const under = k => temp.prefixes.some(p => k.startsWith(p));
  if (objectKey !== '') {
    if (!under(objectKey)) deny(`key ${objectKey} is outside the prefixes`);
  } else if (req.method === 'GET' && !('uploads' in query)) {
    if (!under(typeof query.prefix === 'string' ? query.prefix : '')) deny('a listing outside the prefixes');
  } else if (req.method !== 'POST' || !('delete' in query)) {
    deny('a bucket operation');
  }
}

// ---------------------------------------------------------------- proxy

let s3rverPort = 0;
const keyLocks = new Map(); // "bucket/key" -> promise of the last writer

// Runs fn with the key's lock held: PUTs and DELETEs of one key are
// serialised so that `If-None-Match: *` is a real compare-and-set.
async function withKeyLock(lockKey, fn) {
  const prev = keyLocks.get(lockKey) || Promise.resolve();
  let release;
  const mine = new Promise(r => (release = r));
  const chained = prev.then(() => mine);
  keyLocks.set(lockKey, chained);
  await prev;
  try {
    return await fn();
  } finally {
    release();
    if (keyLocks.get(lockKey) === chained) keyLocks.delete(lockKey);
  }
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'expect', 'transfer-encoding', 'te', 'upgrade', 'proxy-connection', 'trailer']);

function upstream(method, rawTarget, headers, body) {
  return new Promise((resolve, reject) => {
    const h = {};
    for (const [name, value] of Object.entries(headers)) {
      if (HOP_BY_HOP.has(name) || name === 'authorization' || name === 'x-amz-security-token') continue;
      h[name] = value;
    }
    h.host = `127.0.0.1:${s3rverPort}`;
    if (body) h['content-length'] = String(body.length);
    const up = http.request({ host: '127.0.0.1', port: s3rverPort, method, path: rawTarget, headers: h, agent: upstreamAgent }, resolve);
    up.on('error', reject);
    up.end(body && body.length ? body : undefined);
  });
}
const upstreamAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', c => {
      chunks.push(c);
      n += c.length;
    });
    req.on('end', () => resolve(Buffer.concat(chunks, n)));
    req.on('error', reject);
    req.on('aborted', () => reject(new Error('client aborted the request body')));
  });
}

function readAll(stream) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    stream.on('data', c => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
}

function responseHeaders(up) {
  const h = {};
  for (const [name, value] of Object.entries(up.headers)) {
    if (HOP_BY_HOP.has(name)) continue;
    h[name] = value;
  }
  return h;
}

function pickFault(method, reqPath) {
  if (!(settings.fault_rate > 0) || settings.faults.length === 0) return null;
  if (settings.fault_methods && !settings.fault_methods.includes(method)) return null;
  if (settings.fault_path !== null && !String(reqPath || '').split('?')[0].includes(settings.fault_path)) return null;
  if (settings.fault_limit !== null && settings.fault_limit <= 0) return null;
  if (random() >= settings.fault_rate) return null;
  const kind = settings.faults[Math.floor(random() * settings.faults.length)];
  if (settings.fault_limit !== null) settings.fault_limit--;
  bump(counters.faults, kind);
  counters.faults_total++;
  return kind;
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

// Sends the upstream response with a body fault: the headers (with the full
// Content-Length) and the first half of the body, then per kind a reset, a
// stall, or a close. A response without a body gets, for truncate, half a
// status line; for reset a reset; for stall nothing at all.
async function bodyFault(kind, req, res, up, entry) {
  const body = req.method === 'HEAD' ? Buffer.alloc(0) : await readAll(up);
  const sock = req.socket;
  const cut = Math.floor(body.length / 2);
  const reset = () => (typeof sock.resetAndDestroy === 'function' ? sock.resetAndDestroy() : sock.destroy());
  entry.status = up.statusCode;
  if (body.length === 0) {
    if (kind === 'truncate') {
      sock.end(Buffer.from(`HTTP/1.1 ${up.statusCode} OK\r\nContent-Le`));
    } else if (kind === 'reset') {
      reset();
    } else {
      stallSocket(sock);
    }
    return;
  }
  const h = responseHeaders(up);
  delete h['transfer-encoding'];
  h['content-length'] = String(body.length);
  res.writeHead(up.statusCode, h);
  res.write(body.subarray(0, cut), () => {
    counters.bytes_out += cut;
    if (kind === 'truncate') sock.end();
    else if (kind === 'reset') reset();
    else stallSocket(sock);
  });
}

const stalled = new Set();
function stallSocket(sock) {
  // The client sees nothing more until it gives up (closes) or stall_max_s.
  const timer = setTimeout(() => sock.destroy(), settings.stall_max_s * 1000);
  stalled.add(sock);
  sock.on('close', () => {
    clearTimeout(timer);
    stalled.delete(sock);
  });
}

async function handleS3(req, res) {
  bump(counters.requests, req.method);
  counters.requests_total++;
  const rawTarget = req.url;
  const entry = { method: req.method, path: rawTarget.split('?')[0], status: 0, fault: null, error: null };
  note(entry);
  inFlight++;
  if (inFlight > counters.in_flight_max) counters.in_flight_max = inFlight;
  res.on('close', () => inFlight--);

  let body;
  try {
    body = await readBody(req);
  } catch (err) {
    entry.error = String(err.message);
    return;
  }
  counters.bytes_in += body.length;

  const qpos = rawTarget.indexOf('?');
  const rawPath = qpos < 0 ? rawTarget : rawTarget.slice(0, qpos);
  let key, target;
  try {
    if (!rawPath.startsWith('/')) throw new Rejection(400, 'InvalidURI', 'the request target must be a path');
    target = { pathBytes: percentDecode(rawPath, 'path'), query: parseQuery(qpos < 0 ? '' : rawTarget.slice(qpos + 1)) };
    key = await verify(req, target, body);
    const decoded = target.pathBytes.toString('utf8');
    const slash = decoded.indexOf('/', 1);
    target.bucket = slash < 0 ? decoded.slice(1) : decoded.slice(1, slash);
    target.key = slash < 0 ? '' : decoded.slice(slash + 1);
    entry.key = target.key;
    checkScope(req, key, target.bucket, target.key, target.query);
  } catch (err) {
    if (!(err instanceof Rejection)) throw err;
    bump(counters.rejected, err.code);
    entry.status = err.status;
    entry.error = err.code;
    log(`rejected ${req.method} ${rawTarget}: ${err.code}: ${err.message}` +
        (err.canonical ? `\n--- canonical request (server) ---\n${err.canonical}\n--- end ---` : ''));
    s3Error(res, err.status, err.code, err.message);
    return;
  }

  const latency = settings.latency_ms || LATENCY_PROFILES[settings.latency] || 0;
  if (latency > 0) await sleep(latency);

  const fault = pickFault(req.method, req.url);
  entry.fault = fault;
  if (fault === '503') {
    entry.status = 503;
    const extra = settings.retry_after !== null ? { 'Retry-After': String(settings.retry_after) } : {};
    s3Error(res, 503, 'SlowDown', 'Please reduce your request rate.', {}, extra);
    return;
  }
  if (fault === '500') {
    entry.status = 500;
    s3Error(res, 500, 'InternalError', 'We encountered an internal error. Please try again.');
    return;
  }
  if (fault === 'reset_request') {
    // the request is not applied and the client hears nothing but a reset
    const sock = req.socket;
    if (typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy();
    else sock.destroy();
    return;
  }

  const forward = async () => {
    if (req.method === 'PUT' && req.headers['if-none-match'] !== undefined && target.key !== '' &&
        settings.conditional_writes) {
      if (req.headers['if-none-match'].trim() !== '*')
        throw new Rejection(501, 'NotImplemented', 'If-None-Match on PUT takes only *');
      const head = await upstream('HEAD', rawPath, { 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' }, null);
      head.resume();
      if (head.statusCode === 200) {
        counters.precondition_failed++;
        throw new Rejection(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', null);
      }
    }
    bump(counters.forwarded, req.method);
    const headers = { ...req.headers };
    delete headers['if-none-match'];
    const up = await upstream(req.method, rawTarget, req.method === 'PUT' ? headers : req.headers, body);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      // the write is done once the answer is in: keep the lock until then
      const answer = await readAll(up);
      return { up, answer };
    }
    return { up, answer: null };
  };

  let result;
  try {
    const writes = (req.method === 'PUT' || req.method === 'DELETE') && target.key !== '';
    result = writes ? await withKeyLock(`${target.bucket}/${target.key}`, forward) : await forward();
  } catch (err) {
    if (err instanceof Rejection) {
      entry.status = err.status;
      entry.error = err.code;
      if (err.code !== 'PreconditionFailed') bump(counters.rejected, err.code);
      if (fault === 'lost') {
        stallSocket(req.socket); // the answer is lost, a refusal as any other
        return;
      }
      s3Error(res, err.status, err.code, err.message);
      return;
    }
    entry.status = 502;
    entry.error = String(err.message);
    log(`s3rver failed ${req.method} ${rawTarget}: ${err.message}`);
    s3Error(res, 500, 'InternalError', `the test server's s3rver failed: ${err.message}`);
    return;
  }

  const { up, answer } = result;
  if (fault === 'lost') {
    entry.status = up.statusCode;
    if (answer === null) up.resume(); // drained, never sent
    stallSocket(req.socket);
    return;
  }
  if (fault === 'reset' || fault === 'stall' || fault === 'truncate') {
    if (answer !== null) {
      const { Readable } = require('stream');
      const replay = Readable.from([answer]);
      replay.statusCode = up.statusCode;
      replay.headers = up.headers;
      await bodyFault(fault, req, res, replay, entry);
    } else {
      await bodyFault(fault, req, res, up, entry);
    }
    return;
  }
  entry.status = up.statusCode;
  const h = responseHeaders(up);
  if (answer !== null) {
    delete h['transfer-encoding'];
    h['content-length'] = String(answer.length);
    res.writeHead(up.statusCode, h);
    res.end(answer);
    counters.bytes_out += answer.length;
    return;
  }
  res.writeHead(up.statusCode, h);
  up.on('data', c => (counters.bytes_out += c.length));
  up.pipe(res);
  up.on('error', () => req.socket.destroy());
  // a client that goes away mid-body must not leave s3rver's socket paused
  res.on('close', () => {
    if (!up.complete) up.destroy();
  });
}

// ---------------------------------------------------------------- control

const CONTROL_KEYS = {
  fault_rate: v => typeof v === 'number' && v >= 0 && v <= 1,
  faults: v => Array.isArray(v) && v.every(k => FAULT_KINDS.includes(String(k))),
  fault_methods: v => v === null || (Array.isArray(v) && v.every(m => typeof m === 'string')),
  fault_limit: v => v === null || (Number.isInteger(v) && v >= 0),
  fault_path: v => v === null || typeof v === 'string',
  retry_after: v => v === null || (Number.isInteger(v) && v >= 0),
  stall_max_s: v => typeof v === 'number' && v > 0,
  latency: v => v in LATENCY_PROFILES,
  latency_ms: v => Number.isInteger(v) && v >= 0,
  down: v => typeof v === 'boolean',
  down_mode: v => v === 'refuse' || v === 'reset',
  min_ttl: v => typeof v === 'number' && v >= 0,
  temp_ttl_cap: v => v === null || (typeof v === 'number' && v >= 0),
  api_down: v => typeof v === 'boolean',
  api_fault: v => v === null || v === '500' || v === '403' || v === 'bad_json',
  seed: v => v === null || Number.isInteger(v),
  conditional_writes: v => typeof v === 'boolean',
  temp_token_bytes: v => Number.isInteger(v) && v >= 1 && v <= 4096,
};
const CONTROL_ACTIONS = ['reset_counters', 'expire_temp_keys', 'clear_faults'];

async function applyControl(change) {
  if (typeof change !== 'object' || change === null || Array.isArray(change)) throw new Error('a JSON object is wanted');
  for (const [k, v] of Object.entries(change)) {
    if (CONTROL_ACTIONS.includes(k)) {
      if (v !== true) throw new Error(`${k} takes true`);
    } else if (!(k in CONTROL_KEYS)) {
      throw new Error(`unknown setting ${k}`);
    } else if (!CONTROL_KEYS[k](k === 'faults' && Array.isArray(v) ? v.map(String) : v)) {
      throw new Error(`bad value for ${k}: ${JSON.stringify(v)}`);
    }
  }
  if (change.clear_faults) Object.assign(settings, { fault_rate: 0, faults: ['503'], fault_methods: null, fault_limit: null, fault_path: null, retry_after: null, latency: 'clean', latency_ms: 0 });
  if (change.reset_counters) {
    counters = freshCounters();
    recent.length = 0;
  }
  if (change.expire_temp_keys) for (const t of tempKeys.values()) t.expires = 0;
  for (const k of Object.keys(CONTROL_KEYS)) {
    if (!(k in change)) continue;
    settings[k] = k === 'faults' ? change[k].map(String) : change[k];
  }
  if ('latency' in change && !('latency_ms' in change)) settings.latency_ms = 0;
  if ('seed' in change) rngState = change.seed === null ? null : change.seed >>> 0;
  if ('down' in change) await setDown(change.down);
}

function snapshot() {
  return {
    settings,
    counters,
    temp_keys: tempKeys.size,
    s3_port: s3Port,
    control_port: controlPort,
    down: settings.down,
  };
}

function sendJson(res, status, obj) {
  const buf = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': buf.length });
  res.end(buf);
}

function cfError(res, status, code, message) {
  counters.temp_credentials_refused++;
  sendJson(res, status, { success: false, errors: [{ code, message }], messages: [], result: null });
}

async function handleControl(req, res) {
  const body = await readBody(req).catch(() => null);
  if (body === null) return;
  const url = new URL(req.url, 'http://127.0.0.1');
  if (url.pathname === '/control') {
    if (req.method === 'GET') return sendJson(res, 200, snapshot());
    if (req.method === 'POST') {
      let change;
      try {
        change = JSON.parse(body.toString('utf8') || '{}');
        await applyControl(change);
      } catch (err) {
        return sendJson(res, 400, { error: String(err.message) });
      }
      return sendJson(res, 200, snapshot());
    }
    return sendJson(res, 405, { error: 'GET or POST' });
  }
  if (url.pathname === '/control/requests' && req.method === 'GET') return sendJson(res, 200, recent);
  const m = /^\/client\/v4\/accounts\/([^/]+)\/r2\/temp-access-credentials$/.exec(url.pathname);
  if (m) return tempCredentials(req, res, decodeURIComponent(m[1]), body);
  return sendJson(res, 404, { error: `no ${req.method} ${url.pathname} here` });
}

// Cloudflare's POST /accounts/{account_id}/r2/temp-access-credentials.
async function tempCredentials(req, res, accountId, body) {
  if (req.method !== 'POST') return cfError(res, 405, 10405, 'Method not allowed');
  if (settings.api_down) return cfError(res, 503, 10503, 'Service unavailable (api_down)');
  if (settings.api_fault === '500') return cfError(res, 500, 10500, 'Internal error (api_fault)');
  if (settings.api_fault === '403') return cfError(res, 403, 10000, 'Authentication error (api_fault)');
  if (settings.api_fault === 'bad_json') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end('{"success":true,"result":{"accessKeyId":');
  }
  const auth = req.headers.authorization || '';
  const bearer = /^Bearer (.+)$/.exec(auth);
  if (!bearer || bearer[1] !== opts.apiToken) {
    log(`credentials API: refused a ${bearer ? 'wrong' : 'missing'} bearer token`);
    return cfError(res, 403, 10000, 'Authentication error');
  }
  if (accountId !== opts.accountId) return cfError(res, 404, 10001, `no account ${accountId}`);
  let p;
  try {
    p = JSON.parse(body.toString('utf8'));
  } catch (err) {
    return cfError(res, 400, 10002, 'The JSON body is malformed');
  }
  if (typeof p !== 'object' || p === null) return cfError(res, 400, 10002, 'a JSON object is wanted');
  if (typeof p.bucket !== 'string' || p.bucket === '') return cfError(res, 400, 10003, 'bucket is required');
  if (!fs.existsSync(path.join(storeDir, p.bucket))) return cfError(res, 404, 10006, `The specified bucket ${p.bucket} does not exist`);
  if (p.parentAccessKeyId !== opts.accessKey) return cfError(res, 400, 10004, 'parentAccessKeyId is not an access key of this account');
  const perms = ['admin-read-write', 'admin-read-only', 'object-read-write', 'object-read-only'];
  if (!perms.includes(p.permission)) return cfError(res, 400, 10005, `permission must be one of ${perms.join(', ')}`);
  if (!Number.isInteger(p.ttlSeconds) || p.ttlSeconds < settings.min_ttl || p.ttlSeconds > 7 * 86400)
    return cfError(res, 400, 10007, `ttlSeconds must be an integer from ${settings.min_ttl} to ${7 * 86400}`);
  const prefixes = [];
  if (p.prefix !== undefined) {
    if (typeof p.prefix !== 'string') return cfError(res, 400, 10008, 'prefix must be a string');
    if (p.prefix !== '') prefixes.push(p.prefix);
  }
  if (p.prefixes !== undefined) {
    if (!Array.isArray(p.prefixes) || !p.prefixes.every(x => typeof x === 'string')) return cfError(res, 400, 10008, 'prefixes must be strings');
    prefixes.push(...p.prefixes.filter(x => x !== ''));
  }
  const ttl = settings.temp_ttl_cap !== null ? Math.min(p.ttlSeconds, settings.temp_ttl_cap) : p.ttlSeconds;
  const accessKeyId = crypto.randomBytes(16).toString('hex');
  const secretAccessKey = crypto.randomBytes(32).toString('hex');
  const sessionToken = crypto.randomBytes(settings.temp_token_bytes).toString('base64');
  tempKeys.set(accessKeyId, {
    secret: secretAccessKey,
    token: sessionToken,
    expires: Date.now() + ttl * 1000,
    bucket: p.bucket,
    prefixes,
    permission: p.permission,
  });
  counters.temp_credentials_issued++;
  log(`credentials API: issued ${accessKeyId} for ${p.bucket}/${prefixes.join(',')} (${p.permission}, ${ttl} s)`);
  sendJson(res, 200, { success: true, errors: [], messages: [], result: { accessKeyId, secretAccessKey, sessionToken } });
}

// ---------------------------------------------------------------- servers

const sockets = new Set();
let s3Port = 0;
let controlPort = 0;

const s3Server = http.createServer((req, res) => {
  handleS3(req, res).catch(err => {
    log(`internal error on ${req.method} ${req.url}: ${err.stack}`);
    if (!res.headersSent) s3Error(res, 500, 'InternalError', String(err.message));
    else req.socket.destroy();
  });
});
s3Server.keepAliveTimeout = 30000;
s3Server.requestTimeout = 0; // stalls and slow clients are the tests' business
s3Server.on('connection', sock => {
  if (settings.down) {
    // down_mode reset: the port accepts and drops; refuse closes the listener
    counters.connections_refused++;
    if (typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy();
    else sock.destroy();
    return;
  }
  sockets.add(sock);
  sock.on('close', () => sockets.delete(sock));
});
s3Server.on('clientError', (err, sock) => {
  if (sock.writable) sock.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
});

function listen(server, port) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.removeListener('error', reject);
      resolve(server.address().port);
    });
  });
}

async function setDown(down) {
  if (down) {
    for (const sock of sockets) sock.destroy();
    sockets.clear();
    if (settings.down_mode === 'refuse' && s3Server.listening) await new Promise(r => s3Server.close(() => r()));
  } else if (!s3Server.listening) {
    // the same port again; retry briefly if the kernel still holds it
    for (let i = 0; ; i++) {
      try {
        await listen(s3Server, s3Port);
        break;
      } catch (err) {
        if (i >= 50) throw err;
        await sleep(100);
      }
    }
  }
}

const controlServer = http.createServer((req, res) => {
  handleControl(req, res).catch(err => {
    log(`control error: ${err.stack}`);
    if (!res.headersSent) sendJson(res, 500, { error: String(err.message) });
  });
});

let s3rver;

async function main() {
  s3rver = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory: storeDir,
    vhostBuckets: false,
    configureBuckets: opts.buckets.map(name => ({ name })),
  });
  const addr = await s3rver.run();
  s3rverPort = addr.port;
  s3Port = await listen(s3Server, opts.s3Port);
  controlPort = await listen(controlServer, 0);
  process.stdout.write(JSON.stringify({ s3_port: s3Port, control_port: controlPort, pid: process.pid }) + '\n');
}

let stopping = false;
async function shutdown(sig) {
  if (stopping) return;
  stopping = true;
  log(`${sig}: stopping`);
  for (const sock of sockets) sock.destroy();
  for (const sock of stalled) sock.destroy();
  const closing = [];
  if (s3Server.listening) closing.push(new Promise(r => s3Server.close(() => r())));
  closing.push(new Promise(r => controlServer.close(() => r())));
  if (controlServer.closeAllConnections) controlServer.closeAllConnections();
  upstreamAgent.destroy();
  if (s3rver && s3rver.httpServer) {
    if (s3rver.httpServer.closeAllConnections) s3rver.httpServer.closeAllConnections();
    closing.push(s3rver.close().catch(() => {}));
  }
  const timer = setTimeout(() => process.exit(0), 3000);
  await Promise.all(closing);
  clearTimeout(timer);
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

main().catch(err => {
  log(`could not start: ${err.stack}`);
  process.exit(1);
});
