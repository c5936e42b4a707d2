// A functions platform: each tenant deploys a fetch handler; the platform calls it with a
// Request and gets a Response back. Run it:
//   npm run build && node --no-node-snapshot examples/tenant-handlers.mjs
import { createSandbox } from "cordon";

const HANDLER = `
  let served = 0;
  export default {
    async fetch(request) {
      const { name } = await request.json();
      served++;
      return new Response(JSON.stringify({ hello: name, served }), {
        headers: { "content-type": "application/json", "x-tenant": "acme" },
      });
    },
  };`;

const request = () =>
  new Request("https://acme.example/greet", { method: "POST", body: JSON.stringify({ name: "ada" }) });

async function main(sandbox) {
  // One request, one fresh instance: nothing survives the call.
  const once = await sandbox.run({ code: HANDLER, call: { export: "default.fetch", args: [request()] } });
  if (!once.ok) throw new Error(`${once.error.code}: ${once.error.message}`);
  console.log("one-off:", once.value.status, once.value.headers.get("x-tenant"), await once.value.json());

  // Warm: prepared once per tenant (another partitionKey never shares its instances or state).
  const acme = await sandbox.prepare({ code: HANDLER, partitionKey: "acme" });
  for (let i = 1; i <= 3; i++) {
    const result = await acme.call({ export: "default.fetch", args: [request()] });
    if (result.ok) console.log(`warm call ${i}:`, await result.value.json());
  }
  const { warmInstances, idleInstances } = sandbox.stats();
  console.log("stats:", { warmInstances, idleInstances });
}

// Node 20 has no `await using` (TypeScript compiles it): dispose in finally.
const sandbox = await createSandbox();
try {
  await main(sandbox);
} finally {
  await sandbox.dispose();
}
