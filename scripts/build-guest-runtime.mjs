// After tsc: minify the guest runtime for QuickJS once, at build time (src/engines/guest/compact-runtime.ts),
// and make the spares' warm-up modules (src/engines/warm-up-modules.ts), so no process starts esbuild for them.
import { transform } from "esbuild";

const { writePrebuilt } = await import("../dist/engines/guest/compact-runtime.js");
await writePrebuilt(transform);
const warmUp = await import("../dist/engines/warm-up-modules.js");
await warmUp.writePrebuilt();
// The warm-up went through cordon's own esbuild service (its bounded calls): it must not keep the build running.
process.exit(0);
