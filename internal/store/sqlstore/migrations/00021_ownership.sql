-- +goose Up
-- Nodes sharing a store own objects: a workspace is served by the node whose
-- disk holds it, a sandbox by the node that runs it ('' until a node claims
-- rows made before nodes). A node records its own lease (how long after its
-- last heartbeat it counts as lost) and whether its workspaces sit on storage
-- every node reaches at the same path, so that another may adopt them.
-- cluster keeps what the nodes share, such as the key that signs forwarded
-- requests.
ALTER TABLE workspaces ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN lease_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
CREATE INDEX workspaces_node ON workspaces (node_id);
CREATE INDEX sandboxes_node ON sandboxes (node_id, state);
CREATE TABLE cluster (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

-- +goose Down
DROP TABLE cluster;
DROP INDEX sandboxes_node;
DROP INDEX workspaces_node;
ALTER TABLE nodes DROP COLUMN shared;
ALTER TABLE nodes DROP COLUMN lease_ms;
ALTER TABLE sandboxes DROP COLUMN node_id;
ALTER TABLE workspaces DROP COLUMN node_id;
