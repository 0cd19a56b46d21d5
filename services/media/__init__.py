"""Media a customer sends (photos, voice, documents): image tokens, refusal reasons, documents and voice as text."""
