/* Hostile case: Debian's python3 reads the signal dispositions it inherited at start: SIGTERM
 * must read as SIG_DFL (the agent's SIGTERM flush must be invisible), and so must every other
 * signal, the agent's real-time one included. Execs python3 (the agent is preloaded there). */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    static const char script[] =
        "import signal\n"
        "print('SIGTERM', signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)\n"
        "odd = [s for s in range(1, signal.SIGRTMAX + 1) if s not in (9, 19, 32, 33)\n"
        "       and signal.getsignal(s) not in (signal.SIG_DFL, signal.default_int_handler)\n"
        "       and not (s in (signal.SIGPIPE, signal.SIGXFSZ) and signal.getsignal(s) == signal.SIG_IGN)]\n"
        "print('changed', odd)\n";
    fflush(stdout);
    execlp("python3", "python3", "-c", script, (char *)NULL);
    perror("python3");
    return 127;
}
