import vm from "node:vm";
import { describe, expect, it } from "vitest";
import { guestRuntimeScript, HOST_CALLBACK_NAMES } from "../../src/engines/guest/bundle.js";
import { createHostServices } from "../../src/engines/host-services.js";
import { normalizeSource } from "../../src/core/source.js";

/** The guest runtime in a bare realm, its host callbacks recorded. */
function runtimeInRealm() {
  const done: [string, string][] = [];
  const services = createHostServices();
  const context = vm.createContext({
    [HOST_CALLBACK_NAMES.log]: () => {},
    [HOST_CALLBACK_NAMES.call]: () => {},
    [HOST_CALLBACK_NAMES.timer]: () => {},
    [HOST_CALLBACK_NAMES.done]: (kind: string, text: string) => void done.push([kind, text]),
    [HOST_CALLBACK_NAMES.parseUrl]: services.parseUrl,
    [HOST_CALLBACK_NAMES.setUrlPart]: services.setUrlPart,
    [HOST_CALLBACK_NAMES.randomBytes]: services.randomBytes,
  });
  const internals = vm.runInContext(guestRuntimeScript(), context) as {
    warmUp(json: string): void;
    runScript(...args: unknown[]): void;
  };
  return { internals, done };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe("spare instances' warm-up (guest runtime, v8 and quickjs)", () => {
  it("runs modules without reporting their outcomes; the next run reports its own", async () => {
    const { internals, done } = runtimeInRealm();
    const warm = (await normalizeSource("export default (input) => ({ warm: input })", "<cordon>")).script?.code;
    internals.warmUp(JSON.stringify([{ code: warm, inputText: ' {"n":1}', filename: "<cordon>" }]));
    await settle();
    // why: each report is a round trip to the host's thread, which may be busy making another isolate.
    expect(done).toEqual([]);
    const guest = (await normalizeSource("export default () => 42")).script?.code;
    internals.runScript(null, "run", '{"$":"u"}', 1e6, 100, 1e6, 1e6, guest, "<guest>");
    await settle();
    expect(done).toEqual([["o", '{"v":42,"x":{},"k":[]}']]);
  });
});
