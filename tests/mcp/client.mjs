// Drives `cairn --socket S --no-autostart mcp` with the official MCP
// TypeScript SDK client (Client + StdioClientTransport), for
// tests/integration/test_mcp.py.
//
//   node client.mjs CONFIG.json
//
// CONFIG names the scenario and what the Python test prepared:
//   {"scenario": "full", "cairn": PATH, "socket": PATH,
//    "bin_path": PATH, "bin_size": N, "bin_sha256": HEX, "text_path": PATH}
//   {"scenario": "disconnect", "cairn": PATH, "socket": PATH,
//    "mode": "close" | "destroy", "big_hash": HEX, "big_size": N, "timeout": SECONDS}
//
// Prints one JSON line on stdout: {"ok", "checks", "failures", "notes",
// "hashes", "server_pid", "server_stderr"}, and exits 1 when any check
// failed (2 when the script itself could not run). Every check runs even
// after an earlier one failed, so one run reports every difference.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { UriTemplate } from "@modelcontextprotocol/sdk/shared/uriTemplate.js";

const MiB = 1024 * 1024;
const EXPECTED_TOOLS = ["add", "get", "search", "list", "stat", "delete"];

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const failures = [];
const notes = {};
const hashes = {};
let checks = 0;
let serverStderr = "";
let serverPid = null;

function short(v, limit = 600) {
    let s;
    try {
        s = typeof v === "string" ? v : JSON.stringify(v, (k, x) =>
            typeof x === "string" && x.length > 200 ? x.slice(0, 200) + `...<${x.length} chars>` : x);
    } catch {
        s = String(v);
    }
    if (s === undefined) s = String(v);
    return s.length > limit ? s.slice(0, limit) + "..." : s;
}

function check(cond, what, detail) {
    checks++;
    if (!cond) failures.push(detail === undefined ? what : `${what}: ${short(detail)}`);
    return !!cond;
}

function sha256(buf) {
    return createHash("sha256").update(buf).digest("hex");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs one group of checks; an exception fails the group, not the script.
async function step(name, fn) {
    try {
        await fn();
    } catch (e) {
        checks++;
        const code = e instanceof McpError ? ` (JSON-RPC error ${e.code})` : "";
        failures.push(`${name}: threw ${e && e.name}${code}: ${short(e && e.message)}`);
    }
}

function startClient() {
    const transport = new StdioClientTransport({
        command: cfg.cairn,
        args: ["--socket", cfg.socket, "--no-autostart", "mcp", ...(cfg.mcp_args || [])],
        env: process.env,
        stderr: "pipe",
    });
    transport.stderr.on("data", (d) => {
        serverStderr += d.toString("utf8");
        if (serverStderr.length > 40000) serverStderr = serverStderr.slice(-20000);
    });
    const client = new Client({ name: "cairn-mcp-test", version: "1.0.0" }, { capabilities: {} });
    return { client, transport };
}

function finish(code) {
    const ok = failures.length === 0 && code === 0;
    process.stdout.write(JSON.stringify({
        ok, checks, failures, notes, hashes, server_pid: serverPid,
        server_stderr: serverStderr.slice(-6000),
    }) + "\n", () => process.exit(ok ? 0 : (code || 1)));
}

// ---------------------------------------------------------------------------
// helpers for tool results

function textItem(res) {
    const c = Array.isArray(res && res.content) ? res.content : [];
    return c.find((x) => x && x.type === "text");
}

// A successful tool result: not isError, structuredContent an object, and
// (except for get, whose text is the document) a text item holding the same
// JSON.
function expectOk(label, res, { jsonText = true } = {}) {
    if (!check(res && res.isError !== true, `${label}: unexpected isError result`,
        textItem(res) ? textItem(res).text : res)) return null;
    const s = res.structuredContent;
    check(s && typeof s === "object" && !Array.isArray(s), `${label}: structuredContent is not an object`, s);
    check(Array.isArray(res.content) && res.content.length > 0, `${label}: empty content`, res);
    if (jsonText) {
        const t = textItem(res);
        if (check(t, `${label}: no text content item`, res.content)) {
            let parsed;
            try {
                parsed = JSON.parse(t.text);
            } catch {
                parsed = undefined;
            }
            check(isDeepStrictEqual(parsed, s), `${label}: the text item is not the JSON of structuredContent`,
                { text: t.text, structuredContent: s });
        }
    }
    return s || {};
}

// A failed tool call: a result with isError and a message, not a JSON-RPC error.
async function expectToolError(label, name, args) {
    let res;
    try {
        res = await client.callTool(args === undefined ? { name } : { name, arguments: args });
    } catch (e) {
        check(false, `${label}: expected a result with isError: true, got a JSON-RPC error`,
            e instanceof McpError ? { code: e.code, message: e.message } : String(e));
        return;
    }
    if (check(res.isError === true, `${label}: expected isError: true`, res)) {
        const t = textItem(res);
        check(t && typeof t.text === "string" && t.text.length > 0, `${label}: isError result without a message`, res);
    }
}

// A JSON-RPC error (McpError) from a request; returns its code.
async function expectRpcError(label, fn, wantCode) {
    try {
        const r = await fn();
        check(false, `${label}: expected a JSON-RPC error, got a result`, r);
        return null;
    } catch (e) {
        if (!check(e instanceof McpError, `${label}: expected an McpError`, String(e))) return null;
        if (wantCode !== undefined) check(e.code === wantCode, `${label}: error code ${e.code}, expected ${wantCode}`, e.message);
        return e.code;
    }
}

function blobBytes(res) {
    const c = Array.isArray(res.content) ? res.content : [];
    const r = c.find((x) => x && x.type === "resource");
    if (!r || !r.resource || typeof r.resource.blob !== "string") return null;
    return { bytes: Buffer.from(r.resource.blob, "base64"), resource: r.resource };
}

async function listAll(method, key, maxPages = 200) {
    const all = [];
    const pages = [];
    let cursor;
    for (let i = 0; i < maxPages; i++) {
        const r = await client[method](cursor === undefined ? {} : { cursor });
        const items = r[key] || [];
        pages.push(items.length);
        all.push(...items);
        if (!r.nextCursor) return { all, pages };
        cursor = r.nextCursor;
    }
    check(false, `${method}: still a nextCursor after ${maxPages} pages`);
    return { all, pages };
}

// ---------------------------------------------------------------------------
// scenario "full": every tool, every resource method, bad arguments

let client, transport;

async function full() {
    ({ client, transport } = startClient());
    await client.connect(transport);
    serverPid = transport.pid;

    await step("initialize", async () => {
        const info = client.getServerVersion();
        check(info && info.name === "cairn", "serverInfo.name is not cairn", info);
        check(info && typeof info.version === "string" && info.version.length > 0, "serverInfo.version missing", info);
        const caps = client.getServerCapabilities() || {};
        check(caps.tools && typeof caps.tools === "object", "capabilities.tools missing", caps);
        check(caps.resources && typeof caps.resources === "object", "capabilities.resources missing", caps);
        notes.server_version = info && info.version;
        notes.capabilities = caps;
        await client.ping();
    });

    await step("tools/list", async () => {
        const { all: tools } = await listAll("listTools", "tools");
        const names = tools.map((t) => t.name);
        notes.tools = names;
        for (const n of EXPECTED_TOOLS) check(names.includes(n), `tools/list lacks tool ${n}`, names);
        check(new Set(names).size === names.length, "tools/list repeats a tool", names);
        const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
        for (const t of tools) {
            check(t.inputSchema && t.inputSchema.type === "object", `tool ${t.name}: inputSchema is not an object schema`, t.inputSchema);
            check(t.outputSchema && t.outputSchema.type === "object", `tool ${t.name}: no outputSchema of type object`, t.outputSchema);
            check(typeof t.description === "string" && t.description.length > 0, `tool ${t.name}: no description`);
        }
        const props = (n) => Object.keys((byName[n] && byName[n].inputSchema && byName[n].inputSchema.properties) || {});
        const req = (n) => (byName[n] && byName[n].inputSchema && byName[n].inputSchema.required) || [];
        const want = {
            add: ["content", "path", "name", "tags", "meta", "mime"],
            get: ["ref", "offset", "length"],
            search: ["query", "limit", "offset", "tags", "name", "mime", "fuzzy"],
            list: ["prefix", "tag", "limit", "cursor"],
            stat: ["ref"],
            delete: ["ref"],
        };
        for (const [n, ps] of Object.entries(want)) {
            for (const p of ps) check(props(n).includes(p), `tool ${n}: inputSchema lacks property ${p}`, props(n));
        }
        for (const [n, r] of [["get", "ref"], ["search", "query"], ["stat", "ref"], ["delete", "ref"]]) {
            check(req(n).includes(r), `tool ${n}: inputSchema does not require ${r}`, req(n));
        }
    });

    const TEXT = "Hello from the MCP test.\nThe quokka jumps over the zebra.\n";
    const TEXT_NAME = "notes/hello world.txt";
    const UTF8 = "ééé-ünïcödé ✓\n";
    const binFile = readFileSync(cfg.bin_path);
    const textFile = readFileSync(cfg.text_path);

    await step("add content", async () => {
        const res = await client.callTool({
            name: "add",
            arguments: { content: TEXT, name: TEXT_NAME, tags: ["mcp-test", "notes"], meta: { author: "tester", lang: "en" }, mime: "text/plain" },
        });
        const s = expectOk("add content", res);
        hashes.text = sha256(Buffer.from(TEXT));
        check(s.hash === hashes.text, "add content: wrong hash", s);
        check(s.name === TEXT_NAME, "add content: wrong name", s);
        check(s.size === Buffer.byteLength(TEXT), "add content: wrong size", s);
    });

    await step("add utf-8 content", async () => {
        const s = expectOk("add utf-8", await client.callTool({ name: "add", arguments: { content: UTF8, name: "utf8.txt", mime: "text/plain" } }));
        hashes.utf8 = sha256(Buffer.from(UTF8));
        check(s.hash === hashes.utf8 && s.size === Buffer.byteLength(UTF8), "add utf-8: wrong hash or size", s);
    });

    await step("add path (binary)", async () => {
        const s = expectOk("add path", await client.callTool({ name: "add", arguments: { path: cfg.bin_path, name: "bin/blob.bin", tags: ["binary"] } }));
        hashes.bin = cfg.bin_sha256;
        check(s.hash === cfg.bin_sha256, "add path: wrong hash", s);
        check(s.size === cfg.bin_size, "add path: wrong size", s);
        check(s.name === "bin/blob.bin", "add path: wrong name", s);
    });

    await step("add path (text, no name)", async () => {
        const s = expectOk("add text path", await client.callTool({ name: "add", arguments: { path: cfg.text_path } }));
        hashes.text_file = sha256(textFile);
        check(s.hash === hashes.text_file, "add text path: wrong hash", s);
        notes.add_path_default_name = s.name === undefined ? null : s.name;
    });

    await step("add pages", async () => {
        hashes.pages = {};
        for (let i = 0; i < 7; i++) {
            const name = `page/${String(i).padStart(2, "0")}.txt`;
            const content = `page document number ${i}\n`;
            const s = expectOk(`add ${name}`, await client.callTool({ name: "add", arguments: { content, name } }));
            check(s.hash === sha256(Buffer.from(content)), `add ${name}: wrong hash`, s);
            hashes.pages[name] = s.hash;
        }
    });

    // ---- get
    await step("get text", async () => {
        const res = await client.callTool({ name: "get", arguments: { ref: TEXT_NAME } });
        const s = expectOk("get text", res, { jsonText: false });
        const t = textItem(res);
        check(t && t.text === TEXT, "get text: the text item is not the document", res.content);
        check(s.hash === hashes.text && s.name === TEXT_NAME && s.size === Buffer.byteLength(TEXT), "get text: wrong hash/name/size", s);
        check(typeof s.mime === "string" && s.mime.startsWith("text/"), "get text: mime", s);
        check(s.offset === 0 && s.length === Buffer.byteLength(TEXT) && s.truncated === false, "get text: offset/length/truncated", s);
    });

    await step("get text range", async () => {
        const res = await client.callTool({ name: "get", arguments: { ref: hashes.text, offset: 10, length: 6 } });
        const s = expectOk("get text range", res, { jsonText: false });
        const want = Buffer.from(TEXT).subarray(10, 16).toString("utf8");
        const t = textItem(res);
        check(t && t.text === want, `get text range: expected ${JSON.stringify(want)}`, res.content);
        check(t && Buffer.byteLength(t.text) === s.length, "get text range: length is not the text's byte count", s);
        check(s.offset === 10 && s.length === 6 && s.truncated === true, "get text range: offset/length/truncated", s);
    });

    await step("get text by hash prefix", async () => {
        const res = await client.callTool({ name: "get", arguments: { ref: hashes.text.slice(0, 12) } });
        const s = expectOk("get by prefix", res, { jsonText: false });
        check(s.hash === hashes.text, "get by prefix: wrong document", s);
    });

    await step("get range splitting a UTF-8 character", async () => {
        // bytes 1..2 of "ééé" are A9 C3: not UTF-8. They must come back as
        // exactly these bytes (a blob), or the call fails; never U+FFFD.
        const res = await client.callTool({ name: "get", arguments: { ref: "utf8.txt", offset: 1, length: 2 } });
        const b = blobBytes(res);
        notes.get_split_utf8 = res.isError ? "isError" : (b ? "blob" : "text");
        if (!res.isError) {
            check(b && b.bytes.equals(Buffer.from([0xa9, 0xc3])),
                "get of a range that is not valid UTF-8: expected a blob with bytes a9 c3", res.content);
        }
    });

    await step("get range ending inside a UTF-8 character", async () => {
        // bytes 0..2 of "ééé" are C3 A9 C3: a text item may carry "é" with
        // length 2 (the cut character left for the next call), or a blob
        // carries all 3 bytes; never U+FFFD.
        const res = await client.callTool({ name: "get", arguments: { ref: "utf8.txt", offset: 0, length: 3 } });
        const s = expectOk("get cut utf8", res, { jsonText: false });
        const t = textItem(res), b = blobBytes(res);
        notes.get_cut_utf8 = t ? `text ${JSON.stringify(t.text)} length ${s.length}` : "blob";
        if (t) {
            check(t.text === "é" && s.length === 2 && s.truncated === true, "get of a range ending inside a character", { text: t.text, s });
        } else {
            check(b && b.bytes.equals(Buffer.from([0xc3, 0xa9, 0xc3])) && s.length === 3, "get of a range ending inside a character: blob", s);
        }
    });

    await step("empty document", async () => {
        const a = expectOk("add empty", await client.callTool({ name: "add", arguments: { content: "", name: "empty.txt", mime: "text/plain" } }));
        hashes.empty = sha256(Buffer.alloc(0));
        check(a.hash === hashes.empty && a.size === 0, "add empty: hash/size", a);
        const res = await client.callTool({ name: "get", arguments: { ref: "empty.txt" } });
        const s = expectOk("get empty", res, { jsonText: false });
        const t = textItem(res), b = blobBytes(res);
        check((t && t.text === "") || (b && b.bytes.length === 0), "get empty: content", res.content);
        check(s.size === 0 && s.length === 0 && s.truncated === false, "get empty: structuredContent", s);
        expectOk("delete empty", await client.callTool({ name: "delete", arguments: { ref: hashes.empty } }));
    });

    await step("ASCII content with a binary mime type", async () => {
        const content = "just ascii, but declared binary\n";
        const a = expectOk("add ascii-bin", await client.callTool({ name: "add", arguments: { content, name: "ascii.bin", mime: "application/octet-stream" } }));
        const res = await client.callTool({ name: "get", arguments: { ref: a.hash } });
        expectOk("get ascii-bin", res, { jsonText: false });
        const t = textItem(res), b = blobBytes(res);
        notes.get_ascii_with_binary_mime = t ? "text" : "blob";
        check((t && t.text === content) || (b && b.bytes.equals(Buffer.from(content))), "get ascii-bin: bytes", res.content);
        expectOk("delete ascii-bin", await client.callTool({ name: "delete", arguments: { ref: a.hash } }));
    });

    await step("get whole utf-8 text", async () => {
        const res = await client.callTool({ name: "get", arguments: { ref: "utf8.txt" } });
        expectOk("get utf8", res, { jsonText: false });
        const t = textItem(res);
        check(t && t.text === UTF8, "get utf8: text differs", res.content);
    });

    await step("get binary range", async () => {
        const off = 1000000, len = 70000;
        const res = await client.callTool({ name: "get", arguments: { ref: cfg.bin_sha256, offset: off, length: len } });
        const s = expectOk("get binary range", res, { jsonText: false });
        const b = blobBytes(res);
        if (check(b, "get binary range: no resource item with a blob", res.content)) {
            check(b.bytes.equals(binFile.subarray(off, off + len)), "get binary range: wrong bytes", { got: b.bytes.length });
            check(typeof b.resource.mimeType === "string" && b.resource.mimeType.length > 0, "get binary range: resource without mimeType", b.resource);
            check(typeof b.resource.uri === "string" && b.resource.uri.length > 0, "get binary range: resource without uri", b.resource);
            notes.get_blob_uri = b.resource.uri;
        }
        check(!textItem(res) || !textItem(res).text.includes("\ufffd"), "get binary range: binary bytes in a text item");
        check(s.hash === cfg.bin_sha256 && s.size === cfg.bin_size && s.offset === off && s.length === len && s.truncated === true,
            "get binary range: structuredContent", s);
        check(typeof s.mime === "string" && !s.mime.startsWith("text/"), "get binary range: mime of random bytes", s);
    });

    await step("get binary default length and reassembly", async () => {
        const parts = [];
        let off = 0, calls = 0;
        for (;;) {
            const res = await client.callTool({ name: "get", arguments: { ref: "bin/blob.bin", ...(off ? { offset: off } : {}) } });
            calls++;
            const s = expectOk(`get binary at ${off}`, res, { jsonText: false });
            const b = blobBytes(res);
            if (!check(b, `get binary at ${off}: no blob`, res.content)) return;
            const want = Math.min(MiB, cfg.bin_size - off);
            check(s.offset === off && s.length === want && b.bytes.length === want, `get binary at ${off}: expected ${want} bytes`, s);
            check(s.truncated === (off + want < cfg.bin_size), `get binary at ${off}: truncated`, s);
            parts.push(b.bytes);
            off += b.bytes.length;
            if (!s.truncated || b.bytes.length === 0 || calls > 10) break;
        }
        check(sha256(Buffer.concat(parts)) === cfg.bin_sha256, "get binary: the pieces do not make up the document", { calls, off });
    });

    await step("get binary tail and past the end", async () => {
        const off = cfg.bin_size - 100;
        const res = await client.callTool({ name: "get", arguments: { ref: cfg.bin_sha256, offset: off, length: 1000 } });
        const s = expectOk("get tail", res, { jsonText: false });
        const b = blobBytes(res);
        check(b && b.bytes.equals(binFile.subarray(off)), "get tail: wrong bytes", b && b.bytes.length);
        check(s.length === 100 && s.truncated === false, "get tail: length/truncated", s);
        for (const o of [cfg.bin_size, cfg.bin_size + 5]) {
            const r = await client.callTool({ name: "get", arguments: { ref: cfg.bin_sha256, offset: o } });
            if (r.isError) {
                notes[`get_offset_size_plus_${o - cfg.bin_size}`] = "isError";
            } else {
                const st = r.structuredContent || {};
                notes[`get_offset_size_plus_${o - cfg.bin_size}`] = "empty result";
                check(st.length === 0 && st.truncated === false, `get at offset ${o} (size ${cfg.bin_size}): expected length 0`, st);
            }
        }
    });

    // ---- search
    const hitHashes = (s) => (Array.isArray(s.hits) ? s.hits.map((h) => h.hash) : []);
    await step("search", async () => {
        const s = expectOk("search", await client.callTool({ name: "search", arguments: { query: "quokka" } }));
        check(Array.isArray(s.hits), "search: no hits array", s);
        const hit = (s.hits || []).find((h) => h.hash === hashes.text);
        if (check(hit, "search quokka: the text document is not a hit", s)) {
            check(hit.name === TEXT_NAME, "search hit: name", hit);
            check(typeof hit.score === "number", "search hit: score is not a number", hit);
            check(typeof hit.snippet === "string" && hit.snippet.toLowerCase().includes("quokka"), "search hit: snippet", hit);
        }
        const cases = [
            [{ query: "quokka", tags: ["mcp-test"] }, true],
            [{ query: "quokka", tags: ["no-such-tag"] }, false],
            [{ query: "quokka", name: "notes/*" }, true],
            [{ query: "quokka", name: "other/*" }, false],
            [{ query: "quokka", mime: "text/plain" }, true],
            [{ query: "quokka", mime: "image/png" }, false],
            [{ query: "quokkka", fuzzy: true }, true],
            [{ query: "quokkka" }, false],
        ];
        for (const [args, found] of cases) {
            const r = expectOk(`search ${JSON.stringify(args)}`, await client.callTool({ name: "search", arguments: args }));
            check(hitHashes(r).includes(hashes.text) === found,
                `search ${JSON.stringify(args)}: the text document should ${found ? "" : "not "}be a hit`, r);
        }
        const a = expectOk("search limit", await client.callTool({ name: "search", arguments: { query: "page", limit: 2 } }));
        const b = expectOk("search offset", await client.callTool({ name: "search", arguments: { query: "page", limit: 2, offset: 2 } }));
        check(hitHashes(a).length === 2 && hitHashes(b).length === 2, "search limit 2 (7 pages match): expected 2 hits each", { a, b });
        check(!hitHashes(a).some((h) => hitHashes(b).includes(h)), "search offset 2 repeats hits of offset 0", { a, b });
        await expectToolError("search with an unbalanced quote", "search", { query: '"unbalanced' });
    });

    // ---- list
    await step("list with paging", async () => {
        const seen = [];
        const pageSizes = [];
        let cursor;
        for (let i = 0; i < 20; i++) {
            const args = { prefix: "page/", limit: 3, ...(cursor ? { cursor } : {}) };
            const s = expectOk(`list page ${i}`, await client.callTool({ name: "list", arguments: args }));
            if (!check(Array.isArray(s.items), "list: no items array", s)) return;
            pageSizes.push(s.items.length);
            check(s.items.length <= 3, "list: more items than limit", s.items.length);
            for (const it of s.items) {
                seen.push(it.name);
                check(typeof it.hash === "string" && typeof it.size === "number" && typeof it.mime === "string" &&
                    it.created !== undefined && Array.isArray(it.tags), "list item: fields", it);
                check(hashes.pages[it.name] === it.hash, "list item: unexpected document under page/", it);
            }
            if (!s.nextCursor) break;
            check(typeof s.nextCursor === "string", "list: nextCursor is not a string", s.nextCursor);
            cursor = s.nextCursor;
        }
        notes.list_page_sizes = pageSizes;
        check(pageSizes.length >= 3, "list limit 3 over 7 documents: expected at least 3 pages", pageSizes);
        check(seen.length === 7 && new Set(seen).size === 7, "list paging: expected the 7 page/ documents once each", seen);
        const t = expectOk("list tag", await client.callTool({ name: "list", arguments: { tag: "mcp-test" } }));
        check(isDeepStrictEqual((t.items || []).map((x) => x.hash), [hashes.text]), "list tag mcp-test: expected the text document only", t);
        const all = expectOk("list all", await client.callTool({ name: "list", arguments: {} }));
        check((all.items || []).length === 11 && !all.nextCursor, "list without arguments: expected all 11 documents on one page", all.items && all.items.length);
    });

    // ---- stat
    await step("stat", async () => {
        const s = expectOk("stat", await client.callTool({ name: "stat", arguments: { ref: hashes.text } }));
        check(s.hash === hashes.text && s.name === TEXT_NAME, "stat: hash/name", s);
        check(Array.isArray(s.names) && s.names.includes(TEXT_NAME), "stat: names", s);
        check(s.size === Buffer.byteLength(TEXT) && typeof s.stored_size === "number", "stat: size/stored_size", s);
        check(s.mime === "text/plain", "stat: mime", s);
        check(s.created !== undefined && s.created !== null, "stat: created", s);
        check(Array.isArray(s.tags) && isDeepStrictEqual([...s.tags].sort(), ["mcp-test", "notes"]), "stat: tags", s);
        check(isDeepStrictEqual(s.meta, { author: "tester", lang: "en" }), "stat: meta", s);
        const b = expectOk("stat binary", await client.callTool({ name: "stat", arguments: { ref: "bin/blob.bin" } }));
        check(b.hash === cfg.bin_sha256 && b.size === cfg.bin_size && isDeepStrictEqual(b.tags, ["binary"]), "stat binary", b);
    });

    // ---- resources
    await step("resources/list", async () => {
        const { all, pages } = await listAll("listResources", "resources");
        notes.resource_pages = pages;
        const uris = all.map((r) => r.uri);
        check(new Set(uris).size === uris.length, "resources/list repeats a resource", uris);
        const want = [hashes.text, hashes.utf8, hashes.bin, hashes.text_file, ...Object.values(hashes.pages)];
        for (const h of want) check(uris.includes(`cairn://doc/${h}`), `resources/list lacks cairn://doc/${h}`, uris);
        check(all.length === want.length, "resources/list: expected one resource per document", all.length);
        const r = all.find((x) => x.uri === `cairn://doc/${hashes.text}`);
        check(r && r.name === TEXT_NAME && r.mimeType === "text/plain", "resources/list: the text document's name/mimeType", r);
    });

    await step("resources/templates/list", async () => {
        const { all } = await listAll("listResourceTemplates", "resourceTemplates");
        const t = all.map((x) => x.uriTemplate);
        check(t.includes("cairn://doc/{hash}"), "no template cairn://doc/{hash}", t);
        check(t.includes("cairn://name/{name}"), "no template cairn://name/{name}", t);
        for (const x of all) check(typeof x.name === "string" && x.name.length > 0, "resource template without a name", x);
    });

    await step("resources/read", async () => {
        const byHash = `cairn://doc/${hashes.text}`;
        let r = await client.readResource({ uri: byHash });
        check(r.contents && r.contents.length === 1 && r.contents[0].text === TEXT, "read cairn://doc/<hash>: text", r);
        check(r.contents && r.contents[0].uri === byHash && r.contents[0].mimeType === "text/plain", "read cairn://doc/<hash>: uri/mimeType", r.contents);
        // the name form as the SDK expands the server's own template
        const byName = new UriTemplate("cairn://name/{name}").expand({ name: TEXT_NAME });
        notes.name_uri = byName;
        r = await client.readResource({ uri: byName });
        check(r.contents && r.contents[0] && r.contents[0].text === TEXT, `read ${byName}: text`, r);
        r = await client.readResource({ uri: "cairn://name/utf8.txt" });
        check(r.contents && r.contents[0] && r.contents[0].text === UTF8, "read cairn://name/utf8.txt", r);
        r = await client.readResource({ uri: `cairn://doc/${cfg.bin_sha256}` });
        const c = r.contents && r.contents[0];
        if (check(c && typeof c.blob === "string", "read binary resource: no blob", c)) {
            const bytes = Buffer.from(c.blob, "base64");
            notes.resource_read_binary_bytes = bytes.length;
            check(bytes.equals(binFile.subarray(0, bytes.length)), "read binary resource: not the document's bytes");
            check(bytes.length === cfg.bin_size || bytes.length === MiB,
                `read binary resource: ${bytes.length} bytes of ${cfg.bin_size}: neither the document nor its first MiB`);
            check(typeof c.mimeType === "string", "read binary resource: mimeType", c.mimeType);
        }
        notes.read_unknown_hash_code = await expectRpcError("read an unknown hash", () => client.readResource({ uri: `cairn://doc/${"0".repeat(64)}` }));
        notes.read_unknown_name_code = await expectRpcError("read an unknown name", () => client.readResource({ uri: "cairn://name/no-such-name" }));
        notes.read_bad_scheme_code = await expectRpcError("read a foreign uri", () => client.readResource({ uri: "https://example.com/x" }));
        notes.read_bad_kind_code = await expectRpcError("read cairn://bogus/x", () => client.readResource({ uri: "cairn://bogus/x" }));
    });

    // ---- bad arguments: results with isError, never JSON-RPC errors
    await step("bad arguments", async () => {
        const bad = [
            ["add", {}], ["add", { content: "x", path: cfg.text_path }], ["add", { path: "/nonexistent/cairn-mcp-test" }],
            ["add", { content: 5 }], ["add", { content: "x", tags: "not-a-list" }], ["add", { content: "x", meta: { k: 1 } }],
            ["get", {}], ["get", { ref: 5 }], ["get", { ref: hashes.text, length: 0 }], ["get", { ref: hashes.text, length: 1048577 }],
            ["get", { ref: hashes.text, offset: -1 }], ["get", { ref: hashes.text, offset: 1.5 }], ["get", { ref: "no-such-document" }],
            ["search", {}], ["search", { query: "x", limit: 0 }], ["search", { query: "x", limit: 1001 }],
            ["list", { limit: 0 }], ["list", { limit: 1001 }], ["list", { cursor: "not-a-cursor" }],
            ["stat", { ref: "no-such-document" }], ["stat", undefined], ["delete", {}], ["delete", { ref: "no-such-document" }],
        ];
        for (const [tool, args] of bad) await expectToolError(`${tool} ${JSON.stringify(args)}`, tool, args);
    });

    await step("unknown tool", async () => {
        notes.unknown_tool_code = await expectRpcError("tools/call of an unknown tool",
            () => client.callTool({ name: "no_such_tool", arguments: {} }), -32602);
    });

    // ---- delete
    await step("delete", async () => {
        const dry = expectOk("delete dryRun", await client.callTool({ name: "delete", arguments: { ref: hashes.text, dryRun: true } }));
        check(dry.dry_run === true && dry.deleted.includes(hashes.text), "delete dryRun: what would go", dry);
        expectOk("stat after a dry run", await client.callTool({ name: "stat", arguments: { ref: hashes.text } }));
        await expectToolError("delete with a dryRun that is not a boolean", "delete", { ref: hashes.text, dryRun: "yes" });
        const s = expectOk("delete", await client.callTool({ name: "delete", arguments: { ref: hashes.text } }));
        check(s.hash === hashes.text, "delete: hash", s);
        await expectToolError("stat after delete", "stat", { ref: hashes.text });
        await expectToolError("get after delete", "get", { ref: TEXT_NAME });
        const r = expectOk("search after delete", await client.callTool({ name: "search", arguments: { query: "quokka" } }));
        check(!hitHashes(r).includes(hashes.text), "search after delete still finds the document", r);
        await expectRpcError("read after delete", () => client.readResource({ uri: `cairn://doc/${hashes.text}` }));
        const { all } = await listAll("listResources", "resources");
        check(!all.some((x) => x.uri === `cairn://doc/${hashes.text}`), "resources/list after delete still lists the document");
        const p = expectOk("delete by name", await client.callTool({ name: "delete", arguments: { ref: "page/03.txt" } }));
        check(p.hash === hashes.pages["page/03.txt"], "delete by name: hash", p);
        hashes.deleted = [hashes.text, p.hash];
    });

    await step("ping at the end", async () => {
        await client.ping();
    });

    const child = transport._process;
    const exited = child ? new Promise((r) => child.once("exit", (code, signal) => r({ code, signal }))) : Promise.resolve(null);
    const t0 = Date.now();
    await client.close();
    const ex = await Promise.race([exited, sleep(10000).then(() => "timeout")]);
    notes.exit = ex;
    notes.exit_ms = Date.now() - t0;
    // The SDK ends stdin and sends SIGTERM 2 s later: a server that exits 0
    // on SIGTERM must not pass for one that ends by itself.
    check(ex && ex !== "timeout" && ex.code === 0 && ex.signal === null && notes.exit_ms < 1900,
        "cairn mcp did not exit 0 by itself within 2 s of its stdin closing", { exit: ex, ms: notes.exit_ms });
}

// ---------------------------------------------------------------------------
// scenario "disconnect": the client goes away while gets of a large document run

async function disconnect() {
    ({ client, transport } = startClient());
    await client.connect(transport);
    serverPid = transport.pid;
    const child = transport._process;
    let exitInfo = null;
    const exited = new Promise((r) => child.once("exit", (code, signal) => { exitInfo = { code, signal }; r(); }));
    let done = 0;
    const inflight = [];
    // Offsets in the first 4 MiB: each get is cheap to serve, so how long the
    // server takes to end is about the disconnect, not about far ranges.
    for (let i = 0; i < 32; i++) {
        inflight.push(client.callTool({ name: "get", arguments: { ref: cfg.big_hash, offset: (i % 4) * MiB, length: MiB } })
            .then(() => { done++; }, () => {}));
    }
    inflight.push(client.readResource({ uri: `cairn://doc/${cfg.big_hash}` }).then(() => { done++; }, () => {}));
    // wait for the first bytes of an answer: the gets are under way
    await Promise.race([new Promise((r) => child.stdout.once("data", r)), sleep(30000)]);
    notes.completed_before_disconnect = done;
    notes.requests = inflight.length;
    const t0 = Date.now();
    if (cfg.mode === "close") {
        await transport.close(); // ends stdin; SIGTERM after 2 s, SIGKILL 2 s later
    } else {
        child.stdout.destroy(); // the server's writes now fail with EPIPE
        child.stdin.destroy();
    }
    await Promise.race([exited, sleep(cfg.timeout * 1000)]);
    notes.exit = exitInfo;
    notes.exit_ms = Date.now() - t0;
    if (!exitInfo) {
        check(false, `cairn mcp still runs ${cfg.timeout} s after the client went away`);
        child.kill("SIGKILL");
        await exited;
    } else if (cfg.mode === "close") {
        check(exitInfo.code === 0 && exitInfo.signal === null && notes.exit_ms < 1900,
            "after stdin closed mid-get, cairn mcp did not exit 0 by itself within 2 s (the SDK sent SIGTERM/SIGKILL)", exitInfo);
    } else {
        check(exitInfo.signal === null ? [0, 1].includes(exitInfo.code) : exitInfo.signal === "SIGPIPE",
            "after its stdout broke mid-get, cairn mcp ended with something other than exit 0/1 or SIGPIPE", exitInfo);
    }
    await sleep(200); // the rest of its stderr
    check(!/AddressSanitizer|LeakSanitizer|runtime error:/.test(serverStderr), "sanitizer report on the server's stderr", serverStderr.slice(-3000));
    try {
        await client.close();
    } catch {
        // already closed
    }
}

const scenarios = { full, disconnect };
if (!scenarios[cfg.scenario]) {
    failures.push(`unknown scenario ${cfg.scenario}`);
    finish(2);
} else {
    scenarios[cfg.scenario]().then(() => finish(0), (e) => {
        const code = e instanceof McpError ? ` (JSON-RPC error ${e.code})` : "";
        failures.push(`scenario ${cfg.scenario} aborted: ${e && e.name}${code}: ${short(e && e.stack)}`);
        try {
            if (transport && transport._process) transport._process.kill("SIGKILL");
        } catch {
            // gone
        }
        finish(1);
    });
}
