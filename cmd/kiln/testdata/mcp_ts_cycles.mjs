// Connects the official TypeScript SDK's client to a daemon's /mcp and closes it, many
// times over, as short-lived agent clients do (close() sends no DELETE), then checks
// that a new client still works.
// Usage: node mcp_ts_cycles.mjs SDK_NODE_MODULES URL TOKEN CYCLES
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkModules, url, token, cycles] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(join(sdkModules, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

const connect = async () => {
  const client = new Client({ name: "kiln-ts-cycles", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
};

for (let i = 0; i < Number(cycles); i++) {
  try {
    const client = await connect();
    await client.listTools();
    await client.close();
  } catch (e) {
    console.error(`FAIL: cycle ${i}:`, e.message);
    process.exit(1);
  }
}
console.log(`ok: ${cycles} connect/close cycles`);

const client = await connect();
await client.callTool({ name: "session_open", arguments: { session: "after" } });
const r = await client.callTool({ name: "execute", arguments: { session: "after", code: "6 * 7" } });
if (r.structuredContent?.status !== "ok" || r.structuredContent.value_repr !== "42") {
  console.error("FAIL: a new client after the cycles:", JSON.stringify(r));
  process.exit(1);
}
console.log("ok: a new client after the cycles");
await client.close();
