// One Envoy ext_proc exchange (FULL_DUPLEX_STREAMED) against a running tandem-epp, played by
// @grpc/grpc-js (a gRPC implementation independent of ours), for epp_e2e.py:
//
//   node extproc_client.js ADDR PROTO_DIR PATH BODY_JSON [SUBSET]
//
// SUBSET: a comma list of ip:port for envoy.lb.subset_hint ("-" for an empty hint). Sends the
// request headers and the body in two chunks; then, when routed, a 200 response (headers with the
// served endpoint, a two-part SSE body) and prints one JSON line: what came back (destination
// header and metadata, set and removed headers, the body echoed, the response headers added, or
// the immediate response), plus the health services' statuses.
'use strict';
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [addr, protoDir, path, bodyJson, subsetArg] = process.argv.slice(2);
const opts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
               includeDirs: [protoDir] };
const ep = grpc.loadPackageDefinition(
    protoLoader.loadSync('envoy/service/ext_proc/v3/external_processor.proto', opts));
const hp = grpc.loadPackageDefinition(protoLoader.loadSync('grpc/health/v1/health.proto', opts));
const creds = grpc.credentials.createInsecure();
const client = new ep.envoy.service.ext_proc.v3.ExternalProcessor(addr, creds);
const health = new hp.grpc.health.v1.Health(addr, creds);

const timer = setTimeout(() => { console.log(JSON.stringify({ error: 'timeout' })); process.exit(2); },
                         20000);

function hdrs(pairs) {
    return { headers: pairs.map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) };
}
function setHeaders(m) {
    const out = {};
    for (const o of (m && m.set_headers) || []) {
        out[o.header.key] = Buffer.from(o.header.raw_value).toString();
    }
    return out;
}
function check(service) {
    return new Promise((res) => health.Check({ service }, (err, r) => res(err ? `error ${err.code}` : r.status)));
}

async function main() {
    const out = { health: {} };
    for (const s of ['liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor']) {
        out.health[s] = await check(s);
    }
    const call = client.Process();
    const queue = [];
    let waiter = null;
    call.on('data', (m) => { if (waiter) { const w = waiter; waiter = null; w(m); } else queue.push(m); });
    call.on('error', () => {});
    const recv = () => new Promise((res) => { if (queue.length) res(queue.shift()); else waiter = res; });
    const meta = {};
    if (subsetArg) {
        const list = subsetArg === '-' ? [] : subsetArg.split(',');
        meta.filter_metadata = { 'envoy.lb.subset_hint': { fields: {
            'x-gateway-destination-endpoint-subset': { listValue: { values: list.map((s) => ({ stringValue: s })) } } } } };
    }
    call.write({ request_headers: { headers: hdrs([[':method', 'POST'], [':path', path],
                                                   ['content-type', 'application/json'],
                                                   ['x-prefiller-host-port', '6.6.6.6:8000']]),
                                    end_of_stream: false },
                 metadata_context: meta });
    const body = Buffer.from(bodyJson);
    const half = Math.ceil(body.length / 2);
    call.write({ request_body: { body: body.subarray(0, half), end_of_stream: false } });
    call.write({ request_body: { body: body.subarray(half), end_of_stream: true } });
    const first = await recv();
    if (first.response === 'immediate_response') {
        const ir = first.immediate_response;
        out.immediate = { status: ir.status.code, body: Buffer.from(ir.body).toString() };
        call.end();
        return out;
    }
    const common = first.request_headers.response;
    out.set = setHeaders(common.header_mutation);
    out.removed = common.header_mutation.remove_headers;
    const lb = first.dynamic_metadata.fields['envoy.lb'].structValue.fields;
    out.metadata_destination = lb['x-gateway-destination-endpoint'].stringValue;
    const chunks = [];
    for (;;) {
        const r = await recv();
        const sr = r.request_body.response.body_mutation.streamed_response;
        chunks.push(Buffer.from(sr.body));
        if (sr.end_of_stream) break;
    }
    out.body_back = Buffer.concat(chunks).toString();
    const served = out.metadata_destination.split(',')[0];
    call.write({ response_headers: { headers: hdrs([[':status', '200'],
                                                    ['content-type', 'text/event-stream']]) },
                 metadata_context: { filter_metadata: { 'envoy.lb': { fields: {
                     'x-gateway-destination-endpoint-served': { stringValue: served } } } } } });
    const rh = await recv();
    out.response_set = setHeaders(rh.response_headers.response.header_mutation);
    call.write({ response_body: { body: Buffer.from('data: [DONE]\n\n'), end_of_stream: true } });
    await recv();
    call.end();
    return out;
}

main().then((out) => {
    clearTimeout(timer);
    console.log(JSON.stringify(out));
    process.exit(0);
}, (e) => {
    clearTimeout(timer);
    console.log(JSON.stringify({ error: String(e) }));
    process.exit(1);
});
