import { init as initLexer, parse as parseImports } from "es-module-lexer";
import { moduleNotFound } from "./bindings.js";
import { CordonError } from "./errors.js";

/**
 * The refusal of a compiled module that imports a specifier with a NUL in it, else undefined.
 * Both engines' loaders take a specifier as a C string: `import x from "lib\0evil"` loaded "lib".
 * esbuild prints every NUL in a string as `\0`, so text without one is passed at once; the lexer
 * decides whether one is in a specifier (static, re-export or a literal `import()`).
 */
export async function nulSpecifierRefusal(code: string): Promise<CordonError | undefined> {
  if (!code.includes("\\0")) return undefined;
  await initLexer;
  let imports: ReturnType<typeof parseImports>[0];
  try {
    [imports] = parseImports(code);
  } catch {
    // Not lexable (esbuild's output always is): the engine's own parse decides.
    return undefined;
  }
  for (const { n } of imports) {
    if (n?.includes("\0")) return new CordonError("ERR_MODULE_NOT_FOUND", moduleNotFound(n));
  }
  return undefined;
}
