-- Two designs of a claim and its finish, side by side in SQL on the store's
-- own schema (bench/batch-lease/run.sh). No engine, no emit, one session:
-- what the server does per delivery for a claim of 1,000 and the finish of
-- the oldest batch once DEPTH thousand are in flight.
CREATE TABLE IF NOT EXISTS exp_leases (batch BIGSERIAL PRIMARY KEY, owner TEXT, token BIGINT, until BIGINT, ids BIGINT[]);
CREATE TABLE IF NOT EXISTS exp_result (design TEXT, cycles INT, ms DOUBLE PRECISION, claim_ms DOUBLE PRECISION, wal_bytes BIGINT, at TIMESTAMPTZ DEFAULT now());

-- today's design: a claim writes each row's lease; a finish writes its end
CREATE OR REPLACE PROCEDURE exp_now(cycles INT, depth INT DEFAULT 4) LANGUAGE plpgsql AS $$
DECLARE i INT; t0 TIMESTAMPTZ; w0 pg_lsn; c0 TIMESTAMPTZ; claim_ms DOUBLE PRECISION := 0;
BEGIN
  t0 := clock_timestamp(); w0 := pg_current_wal_lsn();
  FOR i IN 1..cycles LOOP
    c0 := clock_timestamp();
    WITH due AS (SELECT id FROM jadpo_deliveries WHERE state = 'due' AND due_at <= 1
                 ORDER BY due_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED)
    UPDATE jadpo_deliveries d SET state = 'running', attempts = d.attempts + 1, lease_owner = 'w',
      lease_token = d.lease_token + 1, lease_until = 1000000 + i, updated_at = i
    FROM due WHERE d.id = due.id;
    COMMIT;
    claim_ms := claim_ms + extract(epoch FROM clock_timestamp() - c0) * 1000;
    IF i > depth THEN
      WITH r AS (SELECT id FROM jadpo_deliveries WHERE state = 'running' ORDER BY lease_until, id LIMIT 1000)
      UPDATE jadpo_deliveries d SET state = 'succeeded', lease_owner = NULL, lease_until = NULL,
        finished_at = i, updated_at = i, handled_at = i, success_started_at = i
      FROM r WHERE d.id = r.id;
      COMMIT;
    END IF;
  END LOOP;
  INSERT INTO exp_result (design, cycles, ms, claim_ms, wal_bytes) VALUES ('rows leased, ' || depth || 'k in flight', cycles,
    extract(epoch FROM clock_timestamp() - t0) * 1000, claim_ms, pg_current_wal_lsn() - w0);
  COMMIT;
END $$;

-- a batch lease: one row holds a claim's ids; in-flight rows stay due and
-- later claims skip them; the finish writes each row's end and the attempt
CREATE OR REPLACE PROCEDURE exp_batch(cycles INT, depth INT DEFAULT 4) LANGUAGE plpgsql AS $$
DECLARE i INT; t0 TIMESTAMPTZ; w0 pg_lsn; c0 TIMESTAMPTZ; claim_ms DOUBLE PRECISION := 0;
BEGIN
  t0 := clock_timestamp(); w0 := pg_current_wal_lsn();
  FOR i IN 1..cycles LOOP
    c0 := clock_timestamp();
    INSERT INTO exp_leases (owner, token, until, ids)
    SELECT 'w', i, 1000000 + i, array_agg(id) FROM (
      SELECT d.id FROM jadpo_deliveries d
      WHERE d.state = 'due' AND d.due_at <= 1
        AND d.id NOT IN (SELECT f.id FROM exp_leases l, unnest(l.ids) AS f(id) WHERE l.until > 1)
      ORDER BY d.due_at, d.id LIMIT 1000 FOR UPDATE OF d SKIP LOCKED) s;
    COMMIT;
    claim_ms := claim_ms + extract(epoch FROM clock_timestamp() - c0) * 1000;
    IF i > depth THEN
      WITH b AS (DELETE FROM exp_leases WHERE batch = (SELECT min(batch) FROM exp_leases) RETURNING ids)
      UPDATE jadpo_deliveries d SET state = 'succeeded', attempts = d.attempts + 1,
        finished_at = i, updated_at = i, handled_at = i, success_started_at = i
      FROM b, unnest(b.ids) AS u(id) WHERE d.id = u.id;
      COMMIT;
    END IF;
  END LOOP;
  INSERT INTO exp_result (design, cycles, ms, claim_ms, wal_bytes) VALUES ('batch lease, ' || depth || 'k in flight', cycles,
    extract(epoch FROM clock_timestamp() - t0) * 1000, claim_ms, pg_current_wal_lsn() - w0);
  COMMIT;
END $$;
