"""Infrastructure of the ordered per-tenant file ingestion pipeline."""
