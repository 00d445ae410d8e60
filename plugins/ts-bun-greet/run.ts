#!/usr/bin/env bun
// ts-bun-greet: py-greet's contract (protocol v2 over stdin/stdout) in TypeScript on Bun.

type Level = "debug" | "info" | "warn" | "error";

interface Request {
  command: string;
  job_id?: string;
  config?: Record<string, unknown> | null;
}

interface Response {
  status: "ok" | "error";
  result?: string;
  error?: string;
  retry?: boolean;
  state_updates?: { last_run: string; last_greeting: string };
  logs: Array<{ level: Level; message: string }>;
}

// As py-greet's `config.get(key, default)` in an f-string: a missing key (or null, which YAML
// gives for an empty value) takes the default, anything else is shown as text.
function text(config: Record<string, unknown>, key: string, fallback: string): string {
  const value = config[key];
  return value === undefined || value === null ? fallback : String(value);
}

function poll(request: Request): Response {
  const config = request.config ?? {};
  const greeting = `${text(config, "greeting", "Hello")}, ${text(config, "name", "World")}!`;
  // ISO 8601 in UTC ending in Z, as py-greet's last_run (milliseconds here, microseconds there).
  const now = new Date().toISOString();
  return {
    status: "ok",
    result: greeting,
    state_updates: { last_run: now, last_greeting: greeting },
    logs: [{ level: "info", message: `${greeting} (job ${request.job_id})` }],
  };
}

function answer(request: Request): Response {
  switch (request.command) {
    case "poll":
      return poll(request);
    case "health":
      return { status: "ok", result: "healthy", logs: [] };
    default:
      return { status: "error", error: `unknown command '${request.command}'`, retry: false, logs: [] };
  }
}

const request = JSON.parse(await Bun.stdin.text()) as Request;
process.stdout.write(JSON.stringify(answer(request)));
