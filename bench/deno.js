// The deno engine's benchmarks, beside a raw pipe to a warm Deno process and a fresh `deno`
// process, measured in the same run.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSandbox } from "../dist/index.js";
import { denoBinary } from "../dist/engines/deno/script.js";
import { report, sample, sampleInterleaved, section } from "./measure.js";

const dir = mkdtempSync(join(tmpdir(), "cordon-bench-deno-"));

/** The floor: a Deno process that echoes length-prefixed frames, read and written like cordon's. */
const ECHO = `const buf = new Uint8Array(1 << 16); let pending = new Uint8Array(0);
for (;;) { const n = await Deno.stdin.read(buf); if (n === null) break;
  const next = new Uint8Array(pending.length + n); next.set(pending); next.set(buf.subarray(0, n), pending.length); pending = next;
  while (pending.length >= 4) { const len = new DataView(pending.buffer, pending.byteOffset).getUint32(0); if (pending.length < 4 + len) break;
    const body = JSON.parse(new TextDecoder().decode(pending.subarray(4, 4 + len))); pending = pending.subarray(4 + len);
    const out = new TextEncoder().encode(JSON.stringify({ t: "reply", value: body.n + 1 }));
    const frame = new Uint8Array(4 + out.length); new DataView(frame.buffer).setUint32(0, out.length); frame.set(out, 4); Deno.stdout.writeSync(frame); } }`;

function startEcho(binary) {
  const script = join(dir, "echo.js");
  writeFileSync(script, ECHO);
  const child = spawn(binary, ["run", "-q", "--no-config", "--no-lock", script], { stdio: ["pipe", "pipe", "inherit"] });
  let waiting;
  let pending = Buffer.alloc(0);
  child.stdout.on("data", (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
      const len = pending.readUInt32BE(0);
      const message = JSON.parse(pending.subarray(4, 4 + len).toString("utf8"));
      pending = pending.subarray(4 + len);
      waiting?.(message);
    }
  });
  return {
    roundTrip(n) {
      const body = Buffer.from(JSON.stringify({ t: "call", n }));
      const frame = Buffer.alloc(4 + body.length);
      frame.writeUInt32BE(body.length, 0);
      body.copy(frame, 4);
      return new Promise((resolve) => {
        waiting = resolve;
        child.stdin.write(frame);
      });
    },
    end: () => child.kill(),
  };
}

/** A fresh `deno` process until it has run a module: what a new function costs without spares. */
function freshDeno(binary) {
  const script = join(dir, "one.js");
  writeFileSync(script, "console.log(1)");
  return new Promise((resolve) => {
    const child = spawn(binary, ["run", "-q", "--no-config", "--no-lock", script], { stdio: ["ignore", "pipe", "inherit"] });
    child.stdout.once("data", () => resolve());
    child.once("exit", () => resolve());
  });
}

export async function benchDeno({ quick }) {
  const binary = denoBinary();
  if (!binary) {
    console.log("\ndeno: skipped (the deno npm package's binary was not found)");
    return;
  }
  const n = quick ? 300 : 2000;
  const raw = startEcho(binary);
  const sandbox = await createSandbox({ engine: "deno", host: "inprocess", spareInstances: 2 });
  const prefix = await sandbox.prepare({ code: "export function handle(e) { return e.n + 1 }" });
  await sandbox.run({ code: "export default (e) => e.n + 1", input: { n: 1 } });

  section("deno: warm call of a trivial handler");
  const [rawTrip, call, run] = await sampleInterleaved(n, [
    () => raw.roundTrip(1),
    () => prefix.call({ export: "handle", args: [{ n: 1 }] }),
    () => sandbox.run({ code: "export default (e) => e.n + 1", input: { n: 1 } }),
  ]);
  report("raw pipe round trip to a warm deno process", rawTrip);
  report("cordon deno prefix.call", call, rawTrip, { target: "p50 <= 0.5 ms" });
  report("cordon deno sandbox.run, the function's process", run, rawTrip);

  section("deno: first call of a new function");
  const first = quick ? 15 : 40;
  let seq = 0;
  // Paced: the spares refill between new functions, as they would between deployments.
  const [fresh, cordonFirst] = await sampleInterleaved(
    first,
    [() => freshDeno(binary), () => sandbox.run({ code: `export default () => ${++seq}` })],
    { gapMs: 250 },
  );
  report("a fresh `deno` process running a module", fresh);
  report("cordon deno first run, spares", cordonFirst, fresh, { target: "p50 <= 10 ms", vs: "fresh deno" });
  const cold = await createSandbox({ engine: "deno", host: "inprocess", spareInstances: 0 });
  const noSpares = await sample(quick ? 5 : 15, () => cold.run({ code: `export default () => ${++seq}` }));
  report("cordon deno first run, no spares", noSpares, fresh, { vs: "fresh deno" });

  raw.end();
  await prefix.dispose();
  await sandbox.dispose();
  await cold.dispose();
}
