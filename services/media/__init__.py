"""Media a customer sends (photos, voice, documents): pure rules, no I/O (image_tokens)."""
