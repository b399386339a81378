/* Hostile case (issue 13, foreign allocators): own_malloc_thread's workload and checking
 * malloc family, but defined by a shared library the program links (built from
 * own_malloc_thread.c with its main renamed), not by the executable: the library comes after
 * the preloaded agent in the search order, so the agent's own malloc is the global one and
 * forwards to this unknown allocator. Its threads must still never call it. */
int own_malloc_main(int argc, char **argv);

int main(int argc, char **argv) { return own_malloc_main(argc, argv); }
