"""ZeroMQ links between the actor and the learner.

Transitions travel actor to learner with sequence numbers, acks, resend and a disk
spool (:mod:`.transitions` sends, :mod:`.transition_receiver` receives); weights
travel learner to actors, latest wins, in verified pieces (:mod:`.weights` publishes,
:mod:`.weight_subscriber` receives). Both links share one skeleton (:mod:`.link`:
server and client loops, heartbeats from :mod:`.heartbeat`, reconnects) and may run
over CURVE (:mod:`.sockets`, :mod:`robotrl.wire.auth`).
"""
