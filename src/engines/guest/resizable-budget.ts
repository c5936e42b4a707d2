/**
 * A budget for resizable ArrayBuffers in a v8 guest realm. V8 reserves such a buffer's
 * `maxByteLength` outside the ArrayBuffer allocator isolated-vm counts against the heap limit:
 * `new ArrayBuffer(200e6, { maxByteLength: 200e6 })` filled took 200 MB of the host under
 * `memoryMb: 32` (a plain one of that size is refused), and `resize()` up to 1.5 GB. The realm's
 * ArrayBuffer becomes a Proxy whose construct trap counts each resizable buffer's
 * `maxByteLength` against `bytes`, for the instance's life (a collected buffer is not given back:
 * nothing tells the realm), and refuses one past it as a plain buffer past the heap is refused.
 *
 * SELF-CONTAINED: stringified into the guest realm (bundle.ts), run before any guest code.
 */
export function budgetResizableBuffers(g: typeof globalThis, bytes: number): void {
  const Target = g.ArrayBuffer;
  const construct = Reflect.construct;
  const defineProperty = Object.defineProperty;
  const NumberCtor = Number;
  const numberIsNaN = Number.isNaN;
  const trunc = Math.trunc;
  const RangeErrorCtor = RangeError;
  let left = bytes;
  const budgeted = new Proxy(Target, {
    construct(target, args, newTarget) {
      const options: unknown = args.length > 1 ? args[1] : undefined;
      if (options === null || (typeof options !== "object" && typeof options !== "function")) {
        return construct(target, [args[0]], newTarget);
      }
      // Read once, as the constructor itself does; what it is given is the number read.
      const max = (options as { maxByteLength?: unknown }).maxByteLength;
      if (max === undefined) return construct(target, [args[0]], newTarget);
      const asNumber = NumberCtor(max);
      const reserved = numberIsNaN(asNumber) ? 0 : trunc(asNumber);
      if (reserved > left) {
        throw new RangeErrorCtor(
          "Array buffer allocation failed: resizable ArrayBuffers of this instance may reserve " + bytes + " bytes in all",
        );
      }
      const buffer = construct(target, [args[0], { maxByteLength: asNumber }], newTarget);
      if (reserved > 0) left -= reserved;
      return buffer;
    },
  });
  defineProperty(g, "ArrayBuffer", { value: budgeted, writable: true, enumerable: false, configurable: true });
  defineProperty(Target.prototype, "constructor", { value: budgeted, writable: true, enumerable: false, configurable: true });
}
