// npm run bench: cordon beside the raw engines it builds on, measured in the same run.
// `npm run bench -- --quick` takes fewer samples. Commit the bench, not its output.
import { availableParallelism, cpus } from "node:os";
import { benchV8 } from "./v8.js";

const quick = process.argv.includes("--quick");
console.log(
  `cordon bench — node ${process.version}, ${availableParallelism()} cores (${cpus()[0]?.model ?? "unknown cpu"})${quick ? ", quick" : ""}`,
);
await benchV8({ quick });
