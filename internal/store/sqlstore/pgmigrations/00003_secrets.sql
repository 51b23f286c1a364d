-- +goose Up
-- Secrets are stored sealed (AES-256-GCM, key in the data dir, the name as
-- additional data): the database alone reveals no value.
CREATE TABLE secrets (
    name        TEXT PRIMARY KEY,
    nonce       BYTEA NOT NULL,
    sealed      BYTEA NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- +goose Down
DROP TABLE secrets;
