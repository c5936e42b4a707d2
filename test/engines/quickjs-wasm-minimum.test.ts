import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newQuickJSWASMModuleFromVariant, newVariant } from "quickjs-emscripten-core";
import { afterAll, describe, expect, it } from "vitest";
import { lowerMemoryMinimum, readQuickJSWasm } from "../../src/engines/quickjs/wasm-memory-minimum.js";

const require = createRequire(import.meta.url);
const wasmPath = require.resolve("@jitl/quickjs-wasmfile-release-sync/wasm");
const PAGE = 65536;
// The project's TypeScript settings carry no WebAssembly types: the calls used here, typed.
interface WasmApi {
  compile(bytes: Uint8Array): Promise<object>;
  instantiate(module: object, imports: object): Promise<object>;
  Memory: new (limits: { initial: number; maximum: number }) => { buffer: ArrayBuffer };
  LinkError: new () => Error;
  Module: { imports(module: object): { module: string; name: string; kind: string }[] };
}
const WebAssembly = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

// A hand-made module: the sections cordon reads, nothing else.
const leb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};
const sleb = (n: number): number[] => {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && !(b & 0x40)) || (n === -1 && b & 0x40)) return [...out, b];
    out.push(b | 0x80);
  }
};
const section = (id: number, body: number[]): number[] => [id, ...leb(body.length), ...body];
const name = (s: string): number[] => [s.length, ...Buffer.from(s)];
function module({ flags = 1, minimum = [0x80 | 44, 2], stackTop = 0x10000, dataAt = 0x20000 } = {}): Uint8Array {
  const memory = [...name("a"), ...name("a"), 2, flags, ...minimum, ...(flags & 1 ? leb(1000) : [])];
  return new Uint8Array([
    ...[0, 0x61, 0x73, 0x6d, 1, 0, 0, 0],
    ...section(2, [1, ...memory]),
    ...section(6, [1, 0x7f, 1, 0x41, ...sleb(stackTop), 0x0b]),
    ...section(11, [1, 0, 0x41, ...sleb(dataAt), 0x0b, 4, 1, 2, 3, 4]),
  ]);
}
/** Does the module link against a memory of `pages`? (Its functions imported as stubs; nothing runs.) */
const links = async (bytes: Uint8Array, pages: number): Promise<boolean> => {
  const compiled = await WebAssembly.compile(bytes);
  const imports: Record<string, Record<string, unknown>> = {};
  for (const { module, name, kind } of WebAssembly.Module.imports(compiled)) {
    imports[module] ??= {};
    imports[module][name] = kind === "memory" ? new WebAssembly.Memory({ initial: pages, maximum: 1000 }) : () => 0;
  }
  try {
    await WebAssembly.instantiate(compiled, imports);
    return true;
  } catch (error) {
    if (error instanceof WebAssembly.LinkError && /memory/.test(error.message)) return false;
    throw error;
  }
};
/** The smallest memory the module links against: its declared minimum. */
const minimumOf = async (bytes: Uint8Array): Promise<number> => {
  let pages = 0;
  while (!(await links(bytes, pages))) pages++;
  return pages;
};

describe("QuickJS's module with a lowered memory minimum", () => {
  const dir = mkdtempSync(join(tmpdir(), "cordon-wasm-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("lowers a hand-made module's minimum to the pages its data and stack pointer reach, in place", async () => {
    // 300 pages declared (two LEB bytes); data up to 0x20004, so 3 pages are needed.
    const original = module();
    expect(await minimumOf(original)).toBe(300);
    const { bytes, minimumPages } = lowerMemoryMinimum(original);
    expect(minimumPages).toBe(3);
    expect(bytes.length).toBe(original.length);
    expect(await minimumOf(bytes)).toBe(3);
    // The stack pointer's start counts too, and the input is left as it was.
    expect(lowerMemoryMinimum(module({ stackTop: 0x50000 })).minimumPages).toBe(5);
    expect(await minimumOf(original)).toBe(300);
  });

  it("leaves a module as it is where lowering is not safe or not possible", async () => {
    // Data beyond the declared minimum: nothing to lower.
    const big = module({ dataAt: 400 * PAGE });
    expect(lowerMemoryMinimum(big)).toEqual({ bytes: big, minimumPages: 300 });
    // A shared memory (flags 3) or a truncated or foreign file: refused, and read as they are.
    expect(() => lowerMemoryMinimum(module({ flags: 3 }))).toThrow(/shared/);
    expect(() => lowerMemoryMinimum(module().subarray(0, 20))).toThrow(/ends early/);
    expect(() => lowerMemoryMinimum(new TextEncoder().encode("#!/bin/sh\nexit 0\n"))).toThrow(/not a WebAssembly module/);
    const file = join(dir, "truncated.wasm");
    writeFileSync(file, module().subarray(0, 20));
    const read = readQuickJSWasm(file);
    expect(Buffer.from(read.bytes).equals(readFileSync(file))).toBe(true);
    expect(read.minimumPages).toBe(256);
  });

  it("runs QuickJS in a memory that starts at the lowered minimum and grows as the guest allocates", async () => {
    const { bytes, minimumPages } = readQuickJSWasm(wasmPath);
    // Far below the 256 pages declared, and not below its 5 MB stack.
    expect(minimumPages).toBeGreaterThanOrEqual(80);
    expect(minimumPages).toBeLessThan(128);
    const variant = require("@jitl/quickjs-wasmfile-release-sync").default;
    // The module as published does not link against a memory that small; the lowered one does,
    // and not against one page less.
    expect(await links(readFileSync(wasmPath), minimumPages)).toBe(false);
    expect(await links(readFileSync(wasmPath), 256)).toBe(true);
    expect(await links(bytes, minimumPages - 1)).toBe(false);
    expect(await links(bytes, minimumPages)).toBe(true);
    const memory = new WebAssembly.Memory({ initial: minimumPages, maximum: 1024 });
    const quickjs = await newQuickJSWASMModuleFromVariant(
      newVariant(variant, { wasmModule: await WebAssembly.compile(bytes), wasmMemory: memory }),
    );
    const vm = quickjs.newContext();
    const result = vm.unwrapResult(vm.evalCode("const a = []; for (let i = 0; i < 4e5; i++) a.push({ i }); a.at(-1).i"));
    expect(vm.getNumber(result)).toBe(4e5 - 1);
    result.dispose();
    expect(memory.buffer.byteLength).toBeGreaterThan((minimumPages + 64) * PAGE);
    vm.dispose();
  });
});
