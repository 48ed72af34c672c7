// graphile-worker draining N no-op jobs, to compare with `jadpo bench`
// (bench/compare.sh runs both). One process, C jobs at once, the local
// queue (500 jobs fetched per batch) and batched completion
// (completeJobBatchDelay 0): graphile-worker's fast settings.
//
//   npm ci && node graphile_perf.js [N] [C]
//
// graphile-worker 0.18.0 declares node >= 22.18; it also ran on node 20.20
// (npm warns at install).
//
// Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
// N (default 50000), C (default 24). Works in a fresh schema of its own,
// dropped at the end. Prints one JSON line:
//   {"peer", "version", "jobs", "concurrency", "enqueue_per_s", "work_per_s", ...}
// enqueue: addJobs in chunks of 1,000 (as `jadpo bench` emits 1,000 per
// store call). work: from starting the runner until every job succeeded and
// the runner stopped (its last completion batch written).

import { EventEmitter } from "node:events";
import { readFileSync } from "node:fs";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const { version } = JSON.parse(
  readFileSync(new URL("./node_modules/graphile-worker/package.json", import.meta.url), "utf8"),
);

const connectionString = process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test";
const n = Number(process.argv[2] || process.env.N || 50000);
const concurrency = Number(process.argv[3] || process.env.C || 24);
if (!Number.isInteger(n) || n < 1 || !Number.isInteger(concurrency) || concurrency < 1) {
  console.error("usage: node graphile_perf.js [N >= 1] [C >= 1]");
  process.exit(2);
}
const CHUNK = 1000;
const schema = `graphile_bench_${process.pid}_${Date.now()}`;

// Warnings and errors only: a line per job would time the console.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`${level}: ${message}`);
});

const seconds = (from) => Number(process.hrtime.bigint() - from) / 1e9;

async function main() {
  const utils = await makeWorkerUtils({ connectionString, schema, logger });
  try {
    await utils.migrate();

    const enqueueStart = process.hrtime.bigint();
    for (let first = 0; first < n; first += CHUNK) {
      const specs = [];
      for (let i = first; i < Math.min(n, first + CHUNK); i++) {
        specs.push({ identifier: "noop", payload: { n: i } });
      }
      await utils.addJobs(specs);
    }
    const enqueue = seconds(enqueueStart);

    const events = new EventEmitter();
    let succeeded = 0;
    let failed = 0;
    let resolveDone;
    const done = new Promise((resolve) => (resolveDone = resolve));
    events.on("job:success", () => {
      if (++succeeded === n) resolveDone();
    });
    events.on("job:error", () => failed++);

    const workStart = process.hrtime.bigint();
    const runner = await run({
      connectionString,
      schema,
      logger,
      events,
      concurrency,
      // graphile-worker's own advice: 10 or concurrentJobs + 2, the larger.
      maxPoolSize: Math.max(10, concurrency + 2),
      noHandleSignals: true,
      taskList: { noop: async () => {} },
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0 } },
    });
    await done;
    await runner.stop();
    const work = seconds(workStart);

    const left = await utils.withPgClient((client) =>
      client.query(`select count(*)::int as left from ${schema}.jobs`).then((r) => r.rows[0].left),
    );
    console.log(
      JSON.stringify({
        peer: "graphile-worker",
        version,
        jobs: n,
        concurrency,
        local_queue: 500,
        max_pool_size: Math.max(10, concurrency + 2),
        complete_job_batch_delay: 0,
        enqueue_seconds: enqueue,
        enqueue_per_s: Math.round((n / enqueue) * 10) / 10,
        work_seconds: work,
        work_per_s: Math.round((n / work) * 10) / 10,
        succeeded,
        failed,
        jobs_left: left,
      }),
    );
    if (left !== 0 || failed !== 0) process.exitCode = 1;
  } finally {
    await utils.withPgClient((client) => client.query(`drop schema if exists ${schema} cascade`)).catch((e) => {
      console.error(`warning: could not drop schema ${schema}: ${e.message}`);
    });
    await utils.release();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
