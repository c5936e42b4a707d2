import { createRequire } from "node:module";

/**
 * Whether `process.execPath -e <script>` runs the script: false in a single executable
 * application (it starts the application again) and in Electron (it starts the app, unless
 * ELECTRON_RUN_AS_NODE is set). Helpers that run as separate Node processes need it.
 */
export function execPathRunsScripts(): boolean {
  if (process.versions.electron !== undefined) return false;
  try {
    return !(createRequire(import.meta.url)("node:sea") as { isSea(): boolean }).isSea();
  } catch {
    // No node:sea (Node before 20.12): single executable applications were experimental there.
    return true;
  }
}
