"""At most once per recipient: recipient lists and chunks, the chunk verdict, pacing, fair share
and warm-up caps, one-click unsubscribe, the send fence (group ownership), and the fan-out
controller and walkers that turn one tick into every recipient's email."""
