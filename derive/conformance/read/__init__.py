"""Reading a target: what it is (`target`), where its weights and options are (the adapters, the
built-in conventions and the Hugging Face tables), and calling it in the book's conventions
(`harness`)."""
