-- Per-key order as docs/decisions.md designs it ("Per-key order: only the
-- head of each key is claimable"), in SQL on the store's own schema
-- (bench/per-key/run.sh): a key column, a `queued` state, one row per key
-- taken by the emit and the finish. No engine, one session: what the
-- server does per delivery to emit EVENTS in batches of 1,000 and drain
-- them in claims of 1,000 and their finishes, keyed over KEYS keys
-- (`fifo`: one due per key) or not at all (KEYS = 0).
ALTER TABLE jadpo_deliveries ADD COLUMN IF NOT EXISTS key TEXT;
ALTER TABLE jadpo_deliveries DROP CONSTRAINT IF EXISTS jadpo_deliveries_state_check;
ALTER TABLE jadpo_deliveries DROP CONSTRAINT IF EXISTS exp_state;
ALTER TABLE jadpo_deliveries ADD CONSTRAINT exp_state
    CHECK (state IN ('due', 'running', 'held', 'succeeded', 'failed', 'parked', 'queued'));
CREATE INDEX IF NOT EXISTS exp_queued ON jadpo_deliveries (subscriber, key, id) WHERE state = 'queued';
CREATE TABLE IF NOT EXISTS exp_keys (subscriber TEXT, key TEXT, unfinished INT NOT NULL, PRIMARY KEY (subscriber, key));
CREATE TABLE IF NOT EXISTS exp_result (design TEXT, emit_ms DOUBLE PRECISION, drain_ms DOUBLE PRECISION,
    rounds INT, at TIMESTAMPTZ DEFAULT now());

CREATE OR REPLACE PROCEDURE exp_run(keys INT, events INT) LANGUAGE plpgsql AS $$
DECLARE b INT; claimed BIGINT; rounds INT := 0; t0 TIMESTAMPTZ; emit_ms DOUBLE PRECISION;
BEGIN
  TRUNCATE jadpo_deliveries, jadpo_events, exp_keys;
  COMMIT;
  t0 := clock_timestamp();
  FOR b IN 0..(events / 1000 - 1) LOOP
    INSERT INTO jadpo_events (id, name, payload, emitted_at, public_id, first_delivery, last_delivery)
    SELECT g, 'Ev', '{}', 0, 'p' || g, g, g FROM generate_series(b * 1000 + 1, b * 1000 + 1000) g;
    IF keys = 0 THEN
      INSERT INTO jadpo_deliveries (id, event_id, subscriber, state, attempts, due_at, budget_from, created_at, updated_at)
      SELECT g, g, 'noop', 'due', 0, 0, 0, 0, 0 FROM generate_series(b * 1000 + 1, b * 1000 + 1000) g;
    ELSE
      WITH batch AS (SELECT g, 'k' || (g % keys) AS key FROM generate_series(b * 1000 + 1, b * 1000 + 1000) g),
      counts AS (SELECT key, count(*)::int AS n FROM batch GROUP BY key),
      up AS (INSERT INTO exp_keys (subscriber, key, unfinished) SELECT 'noop', key, n FROM counts
             ON CONFLICT (subscriber, key) DO UPDATE SET unfinished = exp_keys.unfinished + excluded.unfinished
             RETURNING key, unfinished)
      INSERT INTO jadpo_deliveries (id, event_id, subscriber, key, state, attempts, due_at, budget_from, created_at, updated_at)
      SELECT batch.g, batch.g, 'noop', batch.key,
             CASE WHEN up.unfinished - counts.n = 0
                   AND row_number() OVER (PARTITION BY batch.key ORDER BY batch.g) = 1
                  THEN 'due' ELSE 'queued' END,
             0, 0, 0, 0, 0
      FROM batch JOIN counts USING (key) JOIN up USING (key);
    END IF;
    COMMIT;
  END LOOP;
  emit_ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
  t0 := clock_timestamp();
  LOOP
    WITH due AS (SELECT id FROM jadpo_deliveries WHERE state = 'due' AND due_at <= 1
                 ORDER BY due_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED)
    UPDATE jadpo_deliveries d SET state = 'running', attempts = d.attempts + 1, lease_owner = 'w',
      lease_token = d.lease_token + 1, lease_until = 1000000, updated_at = 1
    FROM due WHERE d.id = due.id;
    GET DIAGNOSTICS claimed = ROW_COUNT;
    COMMIT;
    EXIT WHEN claimed = 0;
    rounds := rounds + 1;
    IF keys = 0 THEN
      WITH r AS (SELECT id FROM jadpo_deliveries WHERE state = 'running' ORDER BY lease_until, id LIMIT 1000)
      UPDATE jadpo_deliveries d SET state = 'succeeded', lease_owner = NULL, lease_until = NULL,
        finished_at = 1, updated_at = 1
      FROM r WHERE d.id = r.id;
    ELSE
      WITH r AS (SELECT id FROM jadpo_deliveries WHERE state = 'running' ORDER BY lease_until, id LIMIT 1000),
      fin AS (UPDATE jadpo_deliveries d SET state = 'succeeded', lease_owner = NULL, lease_until = NULL,
                finished_at = 1, updated_at = 1
              FROM r WHERE d.id = r.id RETURNING d.key),
      dec AS (UPDATE exp_keys k SET unfinished = k.unfinished - c.n
              FROM (SELECT key, count(*)::int AS n FROM fin GROUP BY key) c
              WHERE k.subscriber = 'noop' AND k.key = c.key RETURNING k.key)
      UPDATE jadpo_deliveries d SET state = 'due', updated_at = 1
      FROM (SELECT q.id FROM dec CROSS JOIN LATERAL (
              SELECT id FROM jadpo_deliveries
              WHERE subscriber = 'noop' AND key = dec.key AND state = 'queued'
              ORDER BY id LIMIT 1) q) nx
      WHERE d.id = nx.id;
    END IF;
    COMMIT;
  END LOOP;
  INSERT INTO exp_result (design, emit_ms, drain_ms, rounds)
  VALUES (CASE WHEN keys = 0 THEN 'unkeyed' ELSE keys || ' keys, fifo' END, emit_ms,
          extract(epoch FROM clock_timestamp() - t0) * 1000, rounds);
  COMMIT;
END $$;
