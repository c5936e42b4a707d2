// The guest: an ES module in TypeScript. cordon strips the types and runs it in a V8 isolate.
interface Greeting {
  message: string;
  at: string;
}

export default function hello(input?: { name?: string }): Greeting {
  const name = input?.name ?? "world";
  console.log(`greeting ${name}`);
  return { message: `hello, ${name}`, at: new Date(0).toISOString() };
}
