/**
 * QuickJS's WebAssembly module with a smaller declared minimum memory (decision 013).
 *
 * The release build imports its memory with a minimum of 256 pages (16 MB), so every instance's
 * memory started at 16 MB, though QuickJS needs only its static data and its 5 MB stack before
 * `malloc` grows the memory (the build allows growth). V8 counts a WebAssembly memory's whole size
 * as external memory and collects to free dropped ones: with one memory per instance, 16 MB each
 * drove most of the collections on the QuickJS threads. The module is the same code with the
 * minimum lowered to what its static data and stack occupy; the memory cap is unchanged.
 */
import { readFileSync } from "node:fs";

const WASM_PAGE = 65536;
const IMPORT_SECTION = 2;
const GLOBAL_SECTION = 6;
const DATA_SECTION = 11;
const MEMORY_KIND = 2;
const I32_CONST = 0x41;

export interface QuickJSWasm {
  bytes: Uint8Array;
  /** The minimum the bytes declare: a memory the module imports starts at least this big. */
  minimumPages: number;
}

/**
 * Read the module and lower its imported memory's minimum to the pages its data segments and
 * the stack pointer's start need. Anything unexpected in the module leaves its bytes as they are.
 */
export function readQuickJSWasm(path: string): QuickJSWasm {
  const bytes = new Uint8Array(readFileSync(path));
  try {
    return lowerMemoryMinimum(bytes);
  } catch {
    return { bytes, minimumPages: declaredMinimum(bytes) ?? 256 };
  }
}

interface Layout {
  /** Where the imported memory's minimum is written (an unsigned LEB128), and in how many bytes. */
  minimumAt: number;
  minimumLength: number;
  minimum: number;
  /** The highest address the module's data segments or constant i32 globals (the stack pointer) reach. */
  highestAddress: number;
}

export function lowerMemoryMinimum(bytes: Uint8Array): QuickJSWasm {
  const layout = readLayout(bytes);
  const needed = Math.ceil(layout.highestAddress / WASM_PAGE);
  if (needed >= layout.minimum) return { bytes, minimumPages: layout.minimum };
  const lowered = bytes.slice();
  writePaddedLeb(lowered, layout.minimumAt, layout.minimumLength, needed);
  return { bytes: lowered, minimumPages: needed };
}

function declaredMinimum(bytes: Uint8Array): number | undefined {
  try {
    return readLayout(bytes).minimum;
  } catch {
    return undefined;
  }
}

/** Walks the module's sections: the imported memory's limits, the data's end, the i32 globals. */
function readLayout(bytes: Uint8Array): Layout {
  const reader = new Reader(bytes);
  if (reader.u32le() !== 0x6d736100 || reader.u32le() !== 1) throw new Error("not a WebAssembly module, version 1");
  let memory: Pick<Layout, "minimumAt" | "minimumLength" | "minimum"> | undefined;
  let highestAddress = 0;
  while (!reader.done()) {
    const id = reader.byte();
    const size = reader.leb();
    const end = reader.at + size;
    if (id === IMPORT_SECTION) {
      for (let n = reader.leb(); n > 0; n--) {
        reader.skipName();
        reader.skipName();
        const kind = reader.byte();
        if (kind === MEMORY_KIND) {
          const flags = reader.byte();
          if (flags !== 0 && flags !== 1) throw new Error("a shared or 64-bit memory");
          const minimumAt = reader.at;
          const minimum = reader.leb();
          memory = { minimumAt, minimumLength: reader.at - minimumAt, minimum };
          if (flags === 1) reader.leb();
        } else if (kind === 0) reader.leb();
        else if (kind === 1) {
          reader.byte();
          if (reader.byte() & 1) reader.leb();
          reader.leb();
        } else if (kind === 3) {
          reader.byte();
          reader.byte();
        } else throw new Error(`an import of kind ${kind}`);
      }
    } else if (id === GLOBAL_SECTION) {
      for (let n = reader.leb(); n > 0; n--) {
        reader.byte(); // value type
        reader.byte(); // mutability
        if (reader.byte() !== I32_CONST) throw new Error("a global not set by i32.const");
        highestAddress = Math.max(highestAddress, reader.sleb() >>> 0);
        if (reader.byte() !== 0x0b) throw new Error("a global's initializer longer than one constant");
      }
    } else if (id === DATA_SECTION) {
      for (let n = reader.leb(); n > 0; n--) {
        if (reader.leb() !== 0) throw new Error("a passive or indexed data segment");
        if (reader.byte() !== I32_CONST) throw new Error("a data segment not placed by i32.const");
        const offset = reader.sleb() >>> 0;
        if (reader.byte() !== 0x0b) throw new Error("a data segment's offset longer than one constant");
        const length = reader.leb();
        highestAddress = Math.max(highestAddress, offset + length);
        reader.at += length;
      }
    }
    reader.at = end;
  }
  if (!memory) throw new Error("no imported memory");
  return { ...memory, highestAddress };
}

/** `value` as an unsigned LEB128 padded to exactly `length` bytes (valid: continuation bits set). */
function writePaddedLeb(bytes: Uint8Array, at: number, length: number, value: number): void {
  if (value >= 2 ** (7 * length)) throw new Error("the value does not fit");
  for (let i = 0; i < length; i++) {
    const last = i === length - 1;
    bytes[at + i] = ((value >>> (7 * i)) & 0x7f) | (last ? 0 : 0x80);
  }
}

class Reader {
  at = 0;
  constructor(private readonly bytes: Uint8Array) {}
  done(): boolean {
    return this.at >= this.bytes.length;
  }
  byte(): number {
    if (this.at >= this.bytes.length) throw new Error("the module ends early");
    return this.bytes[this.at++];
  }
  u32le(): number {
    return (this.byte() | (this.byte() << 8) | (this.byte() << 16) | (this.byte() << 24)) >>> 0;
  }
  leb(): number {
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      const b = this.byte();
      value += (b & 0x7f) * 2 ** shift;
      if (!(b & 0x80)) return value;
    }
    throw new Error("an overlong LEB128");
  }
  sleb(): number {
    let value = 0;
    let shift = 0;
    let b: number;
    do {
      b = this.byte();
      value |= (b & 0x7f) << shift;
      shift += 7;
    } while (b & 0x80 && shift < 35);
    return shift < 32 && b & 0x40 ? value | (-1 << shift) : value;
  }
  skipName(): void {
    const length = this.leb();
    this.at += length;
  }
}
