/**
 * cordon's egress module: the only way a guest's `fetch` reaches the network. Rules say what may
 * be reached, a ceiling narrows them, and `createSafeFetch` checks every request and every
 * redirect hop (scheme, URL, rules, every DNS record) before connecting to the checked address.
 */
export { type AddressClass, type AddressReason, canonicalAddress, classifyAddress, type Embedding } from "./addresses.js";
export { type EgressCheck, EgressError } from "./errors.js";
export { importAllowList } from "./imports.js";
export { narrowAllowList } from "./narrow.js";
export { createSystemResolve, type Resolve, type ResolvedAddress } from "./resolve.js";
export { createSafeFetch, type SafeFetch, type SafeFetchOptions } from "./safe-fetch.js";
export {
  type CompiledRules,
  compileRules,
  type MatchResult,
  matchRule,
  type NetRoute,
  type NetRule,
  type NetRuleObject,
  validateRules,
} from "./rules.js";
