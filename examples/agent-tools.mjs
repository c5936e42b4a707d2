// An AI agent's tool sandbox: the host prepares its tools once (the prefix), then runs code the
// agent generated against them (postfixes), each with tight limits. Run it:
//   npm run build && node --no-node-snapshot examples/agent-tools.mjs
import { createSandbox } from "cordon";

const DOCS = ["limits are per run", "a prefix is prepared once", "fetch needs a net capability"];

// What an agent might write: useful code, a runaway loop, and two attempts to reach the host.
const GENERATED = [
  "const hits = await kb.find('prefix');\nreturn { count: hits.length, first: hits[0] }",
  "while (true) {}",
  "return process.env.HOME",
  "return globalThis.constructor.constructor('return process')().pid",
];

async function main(sandbox) {
  // The tools: host functions become async globals; the prefix wraps them for the agent's code.
  const tools = await sandbox.prepare({
    code: "globalThis.kb = { async find(query) { return (await searchDocs(query)).slice(0, 3) } };",
    globals: { searchDocs: async (query) => DOCS.filter((doc) => doc.includes(String(query))) },
  });
  for (const code of GENERATED) {
    const result = await tools.run({ code, limits: { cpuTimeMs: 50, wallTimeMs: 1000 } });
    const outcome = result.ok ? JSON.stringify(result.value) : `${result.error.code}: ${result.error.message}`;
    console.log(`${JSON.stringify(code.split("\n")[0])}\n  -> ${outcome}`);
  }
}

// Node 20 has no `await using` (TypeScript compiles it): dispose in finally.
const sandbox = await createSandbox();
try {
  await main(sandbox);
} finally {
  await sandbox.dispose();
}
