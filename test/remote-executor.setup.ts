import type { TestProject } from "vitest/node";
import { createExecutor, type Executor } from "../src/executor/server.js";

/**
 * One real executor service for the whole run, on 127.0.0.1 and a free port: the conformance
 * suites reach it through the remote host (test/conformance/matrix.ts injects its URL).
 */
let executor: Executor | undefined;

export const REMOTE_SECRET = "cordon-remote-conformance-secret-0123456789";

export async function setup(project: TestProject): Promise<void> {
  executor = await createExecutor({ secret: REMOTE_SECRET, host: "127.0.0.1", port: 0, logger: false });
  project.provide("executorUrl", executor.url);
  project.provide("executorSecret", REMOTE_SECRET);
}

export async function teardown(): Promise<void> {
  await executor?.close({ graceMs: 0 });
}

declare module "vitest" {
  export interface ProvidedContext {
    executorUrl: string;
    executorSecret: string;
  }
}
