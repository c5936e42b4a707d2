/**
 * DOMException for the v8 and quickjs guest realms (a bare realm has none; Node and Deno do):
 * the errors the runtime's web APIs throw by a DOM name (structuredClone's DataCloneError, atob's
 * InvalidCharacterError, ...) are instances of it, as they are in Node.
 *
 * SELF-CONTAINED: injected with `toString()` before the other web APIs, which read
 * `g.DOMException` at install time; it references nothing outside its body.
 */
export function installDOMException(g: typeof globalThis): void {
  const ErrorCtor = Error;
  const defineProperty = Object.defineProperty;
  const objectCreate = Object.create;
  const captureStackTrace = (ErrorCtor as { captureStackTrace?: (target: object, ctor: unknown) => void }).captureStackTrace;
  // The legacy codes, by name (WebIDL's table); any other name has code 0.
  const LEGACY = [
    ["IndexSizeError", "INDEX_SIZE_ERR"],
    ["", "DOMSTRING_SIZE_ERR"],
    ["HierarchyRequestError", "HIERARCHY_REQUEST_ERR"],
    ["WrongDocumentError", "WRONG_DOCUMENT_ERR"],
    ["InvalidCharacterError", "INVALID_CHARACTER_ERR"],
    ["", "NO_DATA_ALLOWED_ERR"],
    ["NoModificationAllowedError", "NO_MODIFICATION_ALLOWED_ERR"],
    ["NotFoundError", "NOT_FOUND_ERR"],
    ["NotSupportedError", "NOT_SUPPORTED_ERR"],
    ["InUseAttributeError", "INUSE_ATTRIBUTE_ERR"],
    ["InvalidStateError", "INVALID_STATE_ERR"],
    ["SyntaxError", "SYNTAX_ERR"],
    ["InvalidModificationError", "INVALID_MODIFICATION_ERR"],
    ["NamespaceError", "NAMESPACE_ERR"],
    ["InvalidAccessError", "INVALID_ACCESS_ERR"],
    ["", "VALIDATION_ERR"],
    ["TypeMismatchError", "TYPE_MISMATCH_ERR"],
    ["SecurityError", "SECURITY_ERR"],
    ["NetworkError", "NETWORK_ERR"],
    ["AbortError", "ABORT_ERR"],
    ["URLMismatchError", "URL_MISMATCH_ERR"],
    ["QuotaExceededError", "QUOTA_EXCEEDED_ERR"],
    ["TimeoutError", "TIMEOUT_ERR"],
    ["InvalidNodeTypeError", "INVALID_NODE_TYPE_ERR"],
    ["DataCloneError", "DATA_CLONE_ERR"],
  ];
  const codes: Record<string, number> = objectCreate(null);
  for (let i = 0; i < LEGACY.length; i++) if (LEGACY[i][0] !== "") codes[LEGACY[i][0]] = i + 1;

  class DOMException extends ErrorCtor {
    #name: string;
    #message: string;

    constructor(message: unknown = undefined, options: unknown = undefined) {
      super();
      this.#message = message === undefined ? "" : `${message}`;
      if (typeof options === "object" && options !== null) {
        const o = options as { name?: unknown; cause?: unknown };
        this.#name = o.name === undefined ? "Error" : `${o.name}`;
        if ("cause" in o)
          defineProperty(this, "cause", { value: o.cause, writable: true, enumerable: false, configurable: true });
      } else this.#name = options === undefined ? "Error" : `${options}`;
      // Again, now that name and message can be read: the stack's first line shows them.
      if (typeof captureStackTrace === "function") captureStackTrace(this, new.target);
    }

    override get name(): string {
      return this.#name;
    }

    override get message(): string {
      return this.#message;
    }

    get code(): number {
      return codes[this.#name] ?? 0;
    }
  }

  // WebIDL: the members are enumerable, the constants read-only on both constructor and prototype.
  for (const key of ["name", "message", "code"]) {
    const d = Reflect.getOwnPropertyDescriptor(DOMException.prototype, key) as PropertyDescriptor;
    d.enumerable = true;
    defineProperty(DOMException.prototype, key, d);
  }
  for (let i = 0; i < LEGACY.length; i++) {
    const d = { value: i + 1, writable: false, enumerable: true, configurable: false };
    defineProperty(DOMException, LEGACY[i][1], d);
    defineProperty(DOMException.prototype, LEGACY[i][1], d);
  }
  defineProperty(DOMException.prototype, Symbol.toStringTag, { value: "DOMException", configurable: true });
  defineProperty(g, "DOMException", { value: DOMException, writable: true, configurable: true });
}
