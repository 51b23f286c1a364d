-- +goose Up
-- Metering (DESIGN.md §2): what each exec and each sandbox used, kept so
-- that the cost of a task survives its workspace and sandboxes. The task
-- label is copied onto the rows at the time, for the same reason.
ALTER TABLE execs ADD COLUMN task TEXT NOT NULL DEFAULT '';
ALTER TABLE execs ADD COLUMN wall_ns BIGINT NOT NULL DEFAULT 0;
CREATE INDEX execs_task ON execs(task, started_at);
CREATE INDEX execs_started ON execs(started_at);

-- What the environment's cgroup counted, read when the sandbox stopped,
-- and what its egress moved.
ALTER TABLE sandboxes ADD COLUMN cgroup_cpu_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN cgroup_peak_mem_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN egress_bytes_up BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN egress_bytes_down BIGINT NOT NULL DEFAULT 0;

-- One row per egress connection the proxy allowed, so that usage since a
-- time counts only what moved since then.
CREATE TABLE egress_usage (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            BIGINT NOT NULL,
    sandbox_id    TEXT NOT NULL,
    workspace_id  TEXT NOT NULL DEFAULT '',
    task          TEXT NOT NULL DEFAULT '',
    bytes_up      BIGINT NOT NULL DEFAULT 0,
    bytes_down    BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX egress_usage_task ON egress_usage(task, at);
CREATE INDEX egress_usage_sandbox ON egress_usage(sandbox_id);

-- +goose Down
DROP TABLE egress_usage;
ALTER TABLE sandboxes DROP COLUMN egress_bytes_down;
ALTER TABLE sandboxes DROP COLUMN egress_bytes_up;
ALTER TABLE sandboxes DROP COLUMN cgroup_peak_mem_bytes;
ALTER TABLE sandboxes DROP COLUMN cgroup_cpu_ns;
DROP INDEX execs_started;
DROP INDEX execs_task;
ALTER TABLE execs DROP COLUMN wall_ns;
ALTER TABLE execs DROP COLUMN task;
