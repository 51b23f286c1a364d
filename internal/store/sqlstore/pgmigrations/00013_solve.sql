-- +goose Up
-- Runs of the agent loop: the record is one JSON document; the state is a
-- column because it is looked up (running runs resume at start) and
-- guarded (a cancel wins over a late update).
CREATE TABLE solve_runs (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    doc         TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX solve_runs_state ON solve_runs (state, created_at);

-- Every step of a run, in order per attempt: the loop replays them to
-- resume after a restart.
CREATE TABLE solve_steps (
    run_id      TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    seq         BIGINT NOT NULL,
    role        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    doc         TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (run_id, attempt, seq)
);

-- +goose Down
DROP TABLE solve_steps;
DROP TABLE solve_runs;
