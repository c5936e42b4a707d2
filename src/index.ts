/** cordon: run JavaScript and TypeScript you did not write, with hard limits. Public API only. */
export { createSandbox } from "./create-sandbox.js";
export { Sandbox } from "./sandbox.js";
export { Prefix, PrepareError } from "./prefix.js";
export { createRpcHandler } from "./hosts/remote/rpc.js";
export type { RpcEnv, RpcHandler } from "./hosts/remote/rpc.js";
export { GrantError } from "./hosts/remote/grant.js";
export type { PrefixCallOptions, PrefixRunOptions } from "./prefix.js";
export { CordonError, ERROR_CODES } from "./core/errors.js";
export type { ErrorCode, RunError } from "./core/errors.js";
export { DEFAULT_LIMITS, MIN_MEMORY_MB, MAX_MEMORY_MB } from "./core/limits.js";
export type {
  AbortedResult,
  Capabilities,
  CompletedResult,
  DefaultExportKind,
  EngineName,
  FailedResult,
  HostBinding,
  HostFunction,
  HostName,
  LogEntry,
  LogLevel,
  NetRule,
  PrefixStats,
  PrepareOptions,
  ReadExportsResult,
  RunLimits,
  RunOptions,
  RunResult,
  RunStats,
  SandboxOptions,
  SandboxPolicy,
  SandboxStats,
} from "./core/types.js";
export { isValidExportName, isValidGlobalName, RESERVED_GLOBAL_NAMES } from "./names.js";
