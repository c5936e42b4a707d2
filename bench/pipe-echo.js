// The other end of bench/process.js's raw pipe round trip: echoes each chunk from stdin to stdout.
// With "poll", after each echo its loop keeps turning for 1 ms (as a polled cordon worker does),
// so the next chunk is read without a wake-up.
const poll = process.argv[2] === "poll";
let until = 0;
let turning = false;
const turn = () => {
  if (performance.now() < until) setImmediate(turn);
  else turning = false;
};
process.stdin.on("data", (chunk) => {
  process.stdout.write(chunk);
  if (!poll) return;
  until = performance.now() + 1;
  if (!turning) {
    turning = true;
    setImmediate(turn);
  }
});
