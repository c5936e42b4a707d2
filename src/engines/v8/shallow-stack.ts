/**
 * isolated-vm's async `apply` captures the caller's stack (up to 10 frames, each optimized frame
 * decoded with its inlined functions) at every call, to attach to an error the call may end in.
 * From the depth cordon calls at (a stream's data handler, the pool, the instance), that capture
 * was 4-8% of the calling thread's time under load; from a microtask the stack is one frame deep.
 * The call still leaves in the same turn of the event loop, in the order it was made.
 */
const settled = Promise.resolve();

export function fromShallowStack<T>(call: () => Promise<T>): Promise<T> {
  return settled.then(call);
}
