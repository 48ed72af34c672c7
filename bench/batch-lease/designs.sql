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

-- a batch lease claimed after a shared cursor: each claim starts where the
-- last one ended (one row, updated once per claim), so it walks no
-- in-flight row; every REWIND-th claim starts from the front instead,
-- skipping in-flight rows, to find what committed behind the cursor
CREATE TABLE IF NOT EXISTS exp_cursor (one BOOL PRIMARY KEY DEFAULT true, due_at BIGINT, id BIGINT);
CREATE OR REPLACE PROCEDURE exp_cursor(cycles INT, depth INT DEFAULT 4, rewind INT DEFAULT 10) LANGUAGE plpgsql AS $$
DECLARE i INT; t0 TIMESTAMPTZ; w0 pg_lsn; c0 TIMESTAMPTZ; claim_ms DOUBLE PRECISION := 0;
  cur_due BIGINT; cur_id BIGINT; last_due BIGINT; last_id BIGINT; claimed BIGINT[];
BEGIN
  DELETE FROM exp_cursor; INSERT INTO exp_cursor VALUES (true, -1, -1); COMMIT;
  t0 := clock_timestamp(); w0 := pg_current_wal_lsn();
  FOR i IN 1..cycles LOOP
    c0 := clock_timestamp();
    SELECT c.due_at, c.id INTO cur_due, cur_id FROM exp_cursor c FOR UPDATE;
    IF i % rewind = 0 THEN
      SELECT array_agg(id ORDER BY due_at, id), max(due_at) INTO claimed, last_due FROM (
        SELECT d.id, d.due_at FROM jadpo_deliveries d
        WHERE d.state = 'due' AND d.due_at <= 1
          AND d.id NOT IN (SELECT f.id FROM exp_leases l, unnest(l.ids) AS f(id) WHERE l.until > 1)
        ORDER BY d.due_at, d.id LIMIT 1000 FOR UPDATE OF d SKIP LOCKED) s;
    ELSE
      SELECT array_agg(id ORDER BY due_at, id), max(due_at) INTO claimed, last_due FROM (
        SELECT d.id, d.due_at FROM jadpo_deliveries d
        WHERE d.state = 'due' AND d.due_at <= 1 AND (d.due_at, d.id) > (cur_due, cur_id)
        ORDER BY d.due_at, d.id LIMIT 1000 FOR UPDATE OF d SKIP LOCKED) s;
      last_id := claimed[array_length(claimed, 1)];
      UPDATE exp_cursor SET due_at = last_due, id = last_id;
    END IF;
    INSERT INTO exp_leases (owner, token, until, ids) VALUES ('w', i, 1000000 + i, claimed);
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
  INSERT INTO exp_result (design, cycles, ms, claim_ms, wal_bytes) VALUES ('batch lease, cursor, ' || depth || 'k in flight', cycles,
    extract(epoch FROM clock_timestamp() - t0) * 1000, claim_ms, pg_current_wal_lsn() - w0);
  COMMIT;
END $$;
