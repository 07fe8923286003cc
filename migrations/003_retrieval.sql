-- Retrieval: document sources, their documents, chunks with full-text search, and per-model embeddings.

CREATE TABLE sources (
    id               bigserial PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    kind             text NOT NULL DEFAULT 'files' CHECK (kind IN ('files', 'urls', 'mixed')),
    uri              text NOT NULL DEFAULT '',
    exposure         text NOT NULL DEFAULT 'prefetch' CHECK (exposure IN ('prefetch', 'agentic_tool', 'off')),
    sync_interval_s  integer CHECK (sync_interval_s IS NULL OR sync_interval_s > 0),
    last_synced_at   timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id               bigserial PRIMARY KEY,
    source_id        bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    uri              text NOT NULL,
    title            text NOT NULL DEFAULT '',
    content_hash     text NOT NULL,
    -- The model whose vectors this document's chunks have; NULL when ingested without embeddings.
    embedding_model  text,
    embedding_dim    integer,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_id, uri)
);

-- array_to_string is only STABLE; a generated column needs an IMMUTABLE expression, and joining
-- text with a space cannot change between calls.
CREATE FUNCTION retrieval_join_headings(path text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(array_to_string(path, ' '), '') $$;

CREATE TABLE chunks (
    id           bigserial PRIMARY KEY,
    document_id  bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    -- Copied from the document so search can filter by source without a join.
    source_id    bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    ord          integer NOT NULL,
    text         text NOT NULL,
    heading_path text[] NOT NULL DEFAULT '{}',
    title        text NOT NULL DEFAULT '',
    token_count  integer NOT NULL,
    -- Title and headings weigh more than body text in ts_rank.
    tsv          tsvector GENERATED ALWAYS AS (
                     setweight(to_tsvector('english'::regconfig, title), 'A')
                     || setweight(to_tsvector('english'::regconfig, retrieval_join_headings(heading_path)), 'B')
                     || setweight(to_tsvector('english'::regconfig, text), 'D')
                 ) STORED,
    UNIQUE (document_id, ord)
);
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);
CREATE INDEX chunks_source_idx ON chunks (source_id);

-- One row per chunk and embedding model, so a new model is added beside the old one. The vector
-- type is unconstrained; each model and dimension gets its own partial HNSW index on
-- `embedding::vector(dim)` WHERE model = ... AND vector_dims(embedding) = dim, created by the
-- ingester the first time it writes such vectors (core/retrieval/store.py).
CREATE TABLE chunk_embeddings (
    chunk_id   bigint NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    model      text NOT NULL,
    source_id  bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    embedding  vector NOT NULL,
    PRIMARY KEY (chunk_id, model)
);
