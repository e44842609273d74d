//! Model files, specs, tokenizers and chat templates.
