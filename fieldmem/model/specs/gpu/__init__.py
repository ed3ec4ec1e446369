"""XLA's per-GPU target configs (``*.txtpb``) for ``--backend gpu:KIND``; see NOTICE.md."""
