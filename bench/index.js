// npm run bench: cordon beside the raw engines it builds on, measured in the same run.
// `npm run bench -- --quick` takes fewer samples; `-- v8`, `-- quickjs`, `-- process`, `-- deno` or `-- load` runs one part.
// Commit the bench, not its output.
import { availableParallelism, cpus } from "node:os";
import { benchDeno } from "./deno.js";
import { benchLoad } from "./load.js";
import { cpuTimes, describeMachine, stealPercent } from "./machine.js";
import { benchProcess } from "./process.js";
import { benchQuickJS } from "./quickjs.js";
import { benchV8 } from "./v8.js";

const quick = process.argv.includes("--quick");
const only = ["v8", "quickjs", "process", "deno", "load"].filter((name) => process.argv.includes(name));
const wanted = (name) => only.length === 0 || only.includes(name);
console.log(
  `cordon bench — node ${process.version}, ${availableParallelism()} cores (${cpus()[0]?.model ?? "unknown cpu"})${quick ? ", quick" : ""}`,
);
console.log(await describeMachine());
const startedAt = cpuTimes();
if (wanted("v8")) await benchV8({ quick });
if (wanted("quickjs")) await benchQuickJS({ quick });
if (wanted("process")) await benchProcess({ quick });
if (wanted("deno")) await benchDeno({ quick });
if (wanted("load")) await benchLoad({ quick });
const steal = stealPercent(startedAt, cpuTimes());
// Figures from a run whose VM lost several percent of its time are slow and vary: say so beside them.
if (steal !== undefined)
  console.log(`\nthe virtual machine's host took ${steal.toFixed(1)}% of the cores' time during this run (steal)`);
