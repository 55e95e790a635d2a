"""What ``jqueue serve`` and its clients both read: the native API's bodies (``bodies``), its
operator calls (``operator_calls``), its error codes (``error_codes``) and the records of a
storage root (``root``). It imports nothing of the server or the client."""
