"""What the families share and nothing of any family: op structure (ops), streaming
(streamed), the search kit (searchable, search_progress, figures_memo), nodes kept in
fp16 (fp16_nodes), what an engine costs (engine_cost) and ModelOpt's logging
(modelopt_log). No entry module: each is imported for what it names."""
