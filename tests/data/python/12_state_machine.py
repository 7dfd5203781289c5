import enum


class State(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"


TRANSITIONS = {
    (State.IDLE, "start"): State.RUNNING,
    (State.RUNNING, "finish"): State.DONE,
    (State.RUNNING, "reset"): State.IDLE,
}


class Machine:
    count = 0

    def __init__(self):
        self.state = State.IDLE
        self.history: list = []
        Machine.count += 1

    def fire(self, event):
        key = (self.state, event)
        if key not in TRANSITIONS:
            raise ValueError(f"bad event {event} in {self.state.value}")
        self.history.append(self.state)
        self.state = TRANSITIONS[key]
        return self.state

    def run(self, events):
        for ev in events:
            try:
                self.fire(ev)
            except ValueError as err:
                print("ignored:", err)
                continue
            else:
                if self.state is State.DONE:
                    break
        return self.state


m = Machine()
print(m.run(["start", "oops", "finish", "start"]), len(m.history))
print(State.DONE.value.upper() if m.state == State.DONE else None)
