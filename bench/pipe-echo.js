// The other end of bench/process.js's raw pipe round trip: echoes each chunk from stdin to stdout.
// With "poll", after each echo its loop keeps turning for 1 ms (as a polled cordon worker does),
// so the next chunk is read without a wake-up.
import { keepTurning } from "./measure.js";

const poll = process.argv[2] === "poll";
process.stdin.on("data", (chunk) => {
  process.stdout.write(chunk);
  if (poll) keepTurning(1);
});
