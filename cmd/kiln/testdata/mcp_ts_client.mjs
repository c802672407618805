// Drives `kiln mcp` with the official TypeScript SDK's client, as an agent client does.
// Usage: node mcp_ts_client.mjs SDK_NODE_MODULES KILN DATA_DIR WORKSPACE
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkModules, kiln, data, workspace] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(join(sdkModules, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

function check(ok, what, value) {
  if (!ok) {
    console.error("FAIL:", what, JSON.stringify(value));
    process.exit(1);
  }
  console.log("ok:", what);
}

const client = new Client({ name: "kiln-ts-check", version: "1" });
await client.connect(new StdioClientTransport({ command: kiln, args: ["mcp", "--data", data, "--workspace", workspace], stderr: "inherit" }));

const tools = (await client.listTools()).tools.map((t) => t.name).sort();
check(["execute", "interrupt", "record", "session_open", "wait"].every((n) => tools.includes(n)), "list tools", tools);

await client.callTool({ name: "session_open", arguments: { session: "ts" } });
let r = await client.callTool({ name: "execute", arguments: { session: "ts", code: "x = 6\nx * 7" } });
check(r.structuredContent.status === "ok" && r.structuredContent.value_repr === "42", "execute", r.structuredContent);

let progress = 0;
r = await client.callTool({ name: "execute", arguments: { session: "ts", code: "import time\ntime.sleep(1.5)\n'slow'", wait_ms: 100 } });
check(r.structuredContent.status === "running" && r.structuredContent.execution_id, "a long cell answers running", r.structuredContent);
r = await client.callTool({ name: "wait", arguments: { execution_id: r.structuredContent.execution_id, wait_ms: 20000 } }, undefined,
  { onprogress: () => { progress++; } });
check(r.structuredContent.status === "ok" && r.structuredContent.value_repr === "'slow'", "wait", r.structuredContent);
check(progress > 0, "progress while waiting", progress);

r = await client.callTool({ name: "execute", arguments: { session: "ts", code: "while True: time.sleep(0.01)", wait_ms: 0 } });
r = await client.callTool({ name: "interrupt", arguments: { execution_id: r.structuredContent.execution_id } });
check(r.structuredContent.status === "interrupted", "interrupt", r.structuredContent);

r = await client.callTool({ name: "execute", arguments: { session: "ts", code: "print('z' * 20000)" } });
const link = r.content.find((c) => c.type === "resource_link");
check(link && r.structuredContent.truncated_bytes > 0, "big output as a resource link", r.content);
const res = await client.readResource({ uri: link.uri });
check(res.contents[0].text.includes("z".repeat(20000)), "read the linked record", res.contents[0].uri);

const dot = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
r = await client.callTool({ name: "execute", arguments: { session: "ts",
  code: `import base64\nclass Dot:\n    def _repr_png_(self): return base64.b64decode('${dot}')\ndisplay(Dot())` } });
const image = r.content.find((c) => c.type === "resource_link" && c.mimeType === "image/png");
check(image && image.uri === r.structuredContent.displays[0].link && !JSON.stringify(r).includes(dot), "an image as a resource link", r);
const blob = (await client.readResource({ uri: image.uri })).contents[0];
check(blob.mimeType === "image/png" && blob.blob === dot, "read the image's bytes", blob);

await client.close();
