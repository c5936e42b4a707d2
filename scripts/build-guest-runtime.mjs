// After tsc: minify the guest runtime for QuickJS once, at build time (src/engines/guest/compact-runtime.ts).
import { transform } from "esbuild";

const { writePrebuilt } = await import("../dist/engines/guest/compact-runtime.js");
await writePrebuilt(transform);
