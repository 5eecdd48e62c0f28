// Plays Envoy's ext_proc filter (FULL_DUPLEX_STREAMED request and response bodies) against
// extproc_test_server with @grpc/grpc-js, a gRPC implementation independent of ours, and checks
// the Endpoint Picker protocol exchange by exchange. Usage: node extproc_e2e.js SERVER PROTO_DIR
'use strict';
const assert = require('assert');
const path = require('path');
const readline = require('readline');
const { spawn } = require('child_process');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [serverExe, protoDir] = process.argv.slice(2);
const loadOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
                   includeDirs: [protoDir] };
const extprocPkg = grpc.loadPackageDefinition(
    protoLoader.loadSync('envoy/service/ext_proc/v3/external_processor.proto', loadOpts));
const healthPkg = grpc.loadPackageDefinition(
    protoLoader.loadSync('grpc/health/v1/health.proto', loadOpts));

const STEP_MS = 10000;
function withTimeout(p, what) {
    let timer;
    const expiry = new Promise((_, rej) => {
        timer = setTimeout(() => rej(new Error(`timed out: ${what}`)), STEP_MS);
    });
    return Promise.race([p, expiry]).finally(() => clearTimeout(timer));
}

// The server's stdout, line by line, awaited in order.
const lines = [];
let waiter = null;
function nextLine(what) {
    return withTimeout(new Promise((resolve) => {
        if (lines.length) { resolve(lines.shift()); return; }
        waiter = resolve;
    }), what);
}

function hdrs(pairs) {
    return { headers: pairs.map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) };
}
// protobufjs brings its own google.protobuf.Struct (camelCase field names).
function strVal(s) { return { stringValue: s }; }
function subsetMeta(list) {
    return { filter_metadata: { 'envoy.lb.subset_hint': { fields: {
        'x-gateway-destination-endpoint-subset': { listValue: { values: list.map(strVal) } } } } } };
}
function servedMeta(ep) {
    return { filter_metadata: { 'envoy.lb': { fields: {
        'x-gateway-destination-endpoint-served': strVal(ep) } } } };
}
function setHeaders(mutation) {
    const out = {};
    for (const o of mutation.set_headers) {
        out[o.header.key] = Buffer.from(o.header.raw_value).toString();
    }
    return out;
}

// One Process stream: send() writes, recv() awaits the next ProcessingResponse, ended() the status.
function openStream(client) {
    const call = client.Process();
    const queue = [];
    let pending = null;
    let status = null;
    let statusWaiter = null;
    call.on('data', (m) => { if (pending) { const p = pending; pending = null; p(m); } else queue.push(m); });
    call.on('error', () => {});
    call.on('status', (s) => { status = s; if (statusWaiter) statusWaiter(s); });
    return {
        call,
        send: (m) => call.write(m),
        recv: (what) => withTimeout(new Promise((res) => {
            if (queue.length) res(queue.shift()); else pending = res;
        }), what),
        ended: (what) => withTimeout(new Promise((res) => {
            if (status) res(status); else statusWaiter = res;
        }), what),
    };
}

function healthCheck(client, service) {
    return withTimeout(new Promise((resolve) => {
        client.Check({ service }, (err, resp) => resolve(err ? { code: err.code, details: err.details } : resp));
    }), `health ${service}`);
}

async function checkHealth(health, server) {
    const live = await healthCheck(health, 'liveness');
    assert.strictEqual(live.status, 'SERVING', JSON.stringify(live));
    assert.strictEqual((await healthCheck(health, 'readiness')).status, 'NOT_SERVING');
    assert.strictEqual((await healthCheck(health, 'envoy.service.ext_proc.v3.ExternalProcessor')).status,
                       'NOT_SERVING');
    assert.strictEqual((await healthCheck(health, 'no-such-service')).code, grpc.status.NOT_FOUND);
    server.stdin.write('ready\n');
    assert.strictEqual(await nextLine('ready ack'), 'OK ready');
    assert.strictEqual((await healthCheck(health, 'readiness')).status, 'SERVING');
    assert.strictEqual((await healthCheck(health, 'envoy.service.ext_proc.v3.ExternalProcessor')).status,
                       'SERVING');
}

// Checks the headers response of a routed request and returns its set headers.
function checkRouted(resp, dest) {
    assert.strictEqual(resp.response, 'request_headers', JSON.stringify(resp));
    const common = resp.request_headers.response;
    assert.strictEqual(common.clear_route_cache, true);
    const set = setHeaders(common.header_mutation);
    assert.strictEqual(set['x-gateway-destination-endpoint'], dest);
    const lb = resp.dynamic_metadata.fields['envoy.lb'].structValue.fields;
    assert.strictEqual(lb['x-gateway-destination-endpoint'].stringValue, dest);
    return { set, removed: common.header_mutation.remove_headers };
}

async function recvBody(s, what) {
    const chunks = [];
    for (let i = 0; i < 64; i++) {
        const r = await s.recv(what);
        assert.strictEqual(r.response, 'request_body', JSON.stringify(r));
        const sr = r.request_body.response.body_mutation.streamed_response;
        assert.ok(sr.body.length <= 62000, 'chunk above the reference EPP limit');
        chunks.push(Buffer.from(sr.body));
        if (sr.end_of_stream) return Buffer.concat(chunks);
    }
    throw new Error('no end_of_stream in the streamed body');
}

async function responsePhase(s, status, served) {
    s.send({ response_headers: { headers: hdrs([[':status', String(status)],
                                                 ['content-type', 'text/event-stream']]) },
             metadata_context: servedMeta(served) });
    const rh = await s.recv('response headers response');
    assert.strictEqual(rh.response, 'response_headers');
    assert.strictEqual(setHeaders(rh.response_headers.response.header_mutation)['x-session-token'],
                       `tok-${status}-${served}`);
    const parts = ['data: {"a":1}\n\n', 'data: [DONE]\n\n'];
    for (let i = 0; i < parts.length; i++) {
        const eos = i === parts.length - 1;
        s.send({ response_body: { body: Buffer.from(parts[i]), end_of_stream: eos } });
        const rb = await s.recv('response body');
        assert.strictEqual(rb.response, 'response_body');
        const sr = rb.response_body.response.body_mutation.streamed_response;
        assert.strictEqual(Buffer.from(sr.body).toString(), parts[i]);
        assert.strictEqual(sr.end_of_stream, eos);
    }
}

async function routedStreamed(client) {
    const s = openStream(client);
    const body = Buffer.from(JSON.stringify({ model: 'm', prompt: 'x'.repeat(150000) }));
    s.send({ request_headers: { headers: hdrs([[':method', 'POST'], [':path', '/v1/completions'],
                                                ['x-request-id', 'req-1'], ['x-test-remove', 'y']]),
                                end_of_stream: false },
             metadata_context: subsetMeta(['10.1.1.1:8000', '10.1.1.2:8000']) });
    const third = Math.ceil(body.length / 3);
    for (let off = 0; off < body.length; off += third) {
        const end = Math.min(off + third, body.length);
        s.send({ request_body: { body: body.subarray(off, end), end_of_stream: end === body.length } });
    }
    const { set, removed } = checkRouted(await s.recv('headers response'), '10.1.1.1:8000');
    assert.strictEqual(set['Content-Length'], String(body.length));
    assert.strictEqual(set['x-request-id'], 'req-1');
    assert.strictEqual(set['x-prefiller-host-port'], '10.0.0.9:8000');
    assert.deepStrictEqual(removed, ['x-test-remove']);
    assert.ok((await recvBody(s, 'request body')).equals(body), 'body not echoed');
    assert.strictEqual(await nextLine('decide'), `DECIDE POST /v1/completions req-1 ${body.length} 2`);
    await responsePhase(s, 200, '10.1.1.1:8000');
    s.call.end();
    assert.strictEqual((await s.ended('stream end')).code, grpc.status.OK);
    assert.strictEqual(await nextLine('done'), 'DONE complete 200 10.1.1.1:8000');
}

async function immediate(client, extraHeader, meta, code, decideLine) {
    const s = openStream(client);
    const pairs = [[':method', 'POST'], [':path', '/v1/chat/completions']];
    if (extraHeader) pairs.push([extraHeader, '1']);
    s.send({ request_headers: { headers: hdrs(pairs), end_of_stream: false }, metadata_context: meta });
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } });
    const r = await s.recv('immediate response');
    assert.strictEqual(r.response, 'immediate_response', JSON.stringify(r));
    const ir = r.immediate_response;
    assert.strictEqual(ir.status.code, code === 429 ? 'TooManyRequests' : 'ServiceUnavailable');
    JSON.parse(Buffer.from(ir.body).toString());
    assert.strictEqual(setHeaders(ir.headers)['content-type'], 'application/json');
    assert.strictEqual((await s.ended('immediate end')).code, grpc.status.OK);
    assert.strictEqual(await nextLine('decide'), decideLine);
    assert.strictEqual(await nextLine('done'), `DONE rejected ${code} -`);
}

async function getWithoutBody(client) {
    const s = openStream(client);
    s.send({ request_headers: { headers: hdrs([[':method', 'GET'], [':path', '/v1/models'],
                                                ['x-test-fallback', '1']]),
                                end_of_stream: true } });
    const { set } = checkRouted(await s.recv('headers response'), '10.0.0.1:8000,10.0.0.2:8000');
    assert.strictEqual(set['Content-Length'], undefined);
    assert.strictEqual(set['x-request-id'], 'generated-id');
    assert.strictEqual(await nextLine('decide'), 'DECIDE GET /v1/models - 0 -1');
    s.send({ response_headers: { headers: hdrs([[':status', '404']]), end_of_stream: true } });
    await s.recv('response headers response');
    s.call.end();
    assert.strictEqual((await s.ended('get end')).code, grpc.status.OK);
    assert.strictEqual(await nextLine('done'), 'DONE complete 404 -');
}

async function replacedBody(client) {
    const s = openStream(client);
    s.send({ request_headers: { headers: hdrs([[':method', 'POST'], [':path', '/v1/replace']]),
                                end_of_stream: false } });
    s.send({ request_body: { body: Buffer.from('{"model":"m","x":1}'), end_of_stream: true } });
    const { set } = checkRouted(await s.recv('headers response'), '10.0.0.1:8000');
    assert.strictEqual(set['Content-Length'], '17');
    assert.strictEqual((await recvBody(s, 'replaced body')).toString(), '{"replaced":true}');
    assert.strictEqual(await nextLine('decide'), 'DECIDE POST /v1/replace - 19 -1');
    s.send({ response_headers: { headers: hdrs([[':status', '200']]), end_of_stream: true },
             metadata_context: servedMeta('10.0.0.1:8000') });
    await s.recv('response headers response');
    s.call.end();
    await s.ended('replace end');
    assert.strictEqual(await nextLine('done'), 'DONE complete 200 10.0.0.1:8000');
}

async function cancelled(client) {
    const s = openStream(client);
    s.send({ request_headers: { headers: hdrs([[':method', 'POST'], [':path', '/v1/completions']]),
                                end_of_stream: false } });
    s.send({ request_body: { body: Buffer.from('{"model":"m"}'), end_of_stream: true } });
    checkRouted(await s.recv('headers response'), '10.0.0.1:8000');
    await recvBody(s, 'body');
    assert.strictEqual(await nextLine('decide'), 'DECIDE POST /v1/completions - 13 -1');
    s.call.cancel();
    assert.strictEqual(await nextLine('done'), 'DONE cancelled 0 -');
}

async function tooLarge(client, server) {
    const s = openStream(client);
    s.send({ request_headers: { headers: hdrs([[':method', 'POST'], [':path', '/v1/completions']]),
                                end_of_stream: false } });
    const chunk = Buffer.alloc(300000, 0x61);
    for (let i = 0; i < 4; i++) {
        s.send({ request_body: { body: chunk, end_of_stream: i === 3 } });
    }
    const r = await s.recv('413');
    assert.strictEqual(r.response, 'immediate_response', JSON.stringify(r));
    assert.strictEqual(r.immediate_response.status.code, 413);
    assert.strictEqual((await s.ended('413 end')).code, grpc.status.OK);
    // No decide() ran, so nothing is printed for it: the next line is the ack of this command.
    server.stdin.write('ping\n');
    assert.strictEqual(await nextLine('ping ack'), 'OK ping');
}

async function outOfOrder(client) {
    const s = openStream(client);
    s.send({ request_body: { body: Buffer.from('x'), end_of_stream: true } });
    assert.strictEqual((await s.ended('protocol error')).code, grpc.status.INVALID_ARGUMENT);
}

async function main() {
    const server = spawn(serverExe, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    readline.createInterface({ input: server.stdout }).on('line', (l) => {
        if (waiter) { const w = waiter; waiter = null; w(l); } else lines.push(l);
    });
    const exited = new Promise((res) => server.on('exit', (code, sig) => res({ code, sig })));
    try {
        const portLine = await nextLine('port');
        const port = Number(/^PORT (\d+)$/.exec(portLine)[1]);
        const addr = `127.0.0.1:${port}`;
        const creds = grpc.credentials.createInsecure();
        const health = new healthPkg.grpc.health.v1.Health(addr, creds);
        const client = new extprocPkg.envoy.service.ext_proc.v3.ExternalProcessor(addr, creds);
        await checkHealth(health, server);
        await routedStreamed(client);
        await immediate(client, 'x-test-shed', undefined, 429, 'DECIDE POST /v1/chat/completions - 13 -1');
        await immediate(client, null, subsetMeta([]), 503, 'DECIDE POST /v1/chat/completions - 13 0');
        await getWithoutBody(client);
        await replacedBody(client);
        await cancelled(client);
        await tooLarge(client, server);
        await outOfOrder(client);
        // A stream still open when the server stops: its exchange ends as cancelled.
        const open = openStream(client);
        open.send({ request_headers: { headers: hdrs([[':method', 'GET'], [':path', '/health']]),
                                       end_of_stream: true } });
        checkRouted(await open.recv('open stream headers response'), '10.0.0.1:8000');
        assert.strictEqual(await nextLine('decide'), 'DECIDE GET /health - 0 -1');
        server.stdin.end();
        assert.strictEqual(await nextLine('done at stop'), 'DONE cancelled 0 -');
        health.close();
        client.close();
    } finally {
        server.stdin.end();
    }
    const { code, sig } = await withTimeout(exited, 'server exit');
    assert.strictEqual(code, 0, `server exited with ${code} ${sig}`);
    console.log('extproc e2e: all exchanges passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
