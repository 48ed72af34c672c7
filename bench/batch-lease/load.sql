-- 200,000 due deliveries of 200,000 events, analyzed, after a checkpoint.
TRUNCATE jadpo_deliveries, jadpo_events, exp_leases;
INSERT INTO jadpo_events (id, name, payload, emitted_at, public_id, first_delivery, last_delivery)
SELECT g, 'Ev', '{}', 0, 'p' || g, g, g FROM generate_series(1, 200000) g;
INSERT INTO jadpo_deliveries (id, event_id, subscriber, state, attempts, due_at, budget_from, created_at, updated_at)
SELECT g, g, 'noop', 'due', 0, 0, 0, 0, 0 FROM generate_series(1, 200000) g;
VACUUM ANALYZE jadpo_deliveries;
VACUUM ANALYZE jadpo_events;
CHECKPOINT;
