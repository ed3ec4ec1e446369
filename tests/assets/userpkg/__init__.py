"""A user's package: ``userpkg.model`` registers cases with the decorator form."""
