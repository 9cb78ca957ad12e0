"""The wire format: a msgpack header plus raw array frames, validated before anything is built."""
