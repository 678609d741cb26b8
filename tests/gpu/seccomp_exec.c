/* seccomp_exec ALLOWED FAMILIES COMMAND...: runs COMMAND under the system-call filter a unit with
   SystemCallFilter=, SystemCallErrorNumber=EPERM and RestrictAddressFamilies= gives its processes.
   ALLOWED holds system-call names, FAMILIES address-family numbers, whitespace-separated. libseccomp's
   header is often not installed where its library is, so the few declarations needed are here. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef void *scmp_filter_ctx;
struct scmp_arg_cmp { unsigned int arg; int op; uint64_t datum_a; uint64_t datum_b; };
scmp_filter_ctx seccomp_init(uint32_t def_action);
int seccomp_rule_add(scmp_filter_ctx ctx, uint32_t action, int syscall, unsigned int arg_cnt, ...);
int seccomp_syscall_resolve_name(const char *name);
int seccomp_load(scmp_filter_ctx ctx);

#define SCMP_ACT_ALLOW 0x7fff0000U
#define SCMP_ACT_ERRNO(x) (0x00050000U | ((x) & 0x0000ffffU))
#define SCMP_CMP_EQ 4

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s ALLOWED FAMILIES COMMAND...\n", argv[0]); return 2; }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  int socket_nr = seccomp_syscall_resolve_name("socket");
  char name[128];
  int allowed = 0;
  FILE *names = fopen(argv[1], "r");
  if (!names) { perror(argv[1]); return 2; }
  while (fscanf(names, "%127s", name) == 1) {
    int nr = seccomp_syscall_resolve_name(name);
    /* socket() is allowed per address family below. */
    if (nr >= 0 && nr != socket_nr && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0) allowed++;
  }
  FILE *families = fopen(argv[2], "r");
  if (!families) { perror(argv[2]); return 2; }
  unsigned long long family;
  while (fscanf(families, "%llu", &family) == 1) {
    struct scmp_arg_cmp first_argument = {0, SCMP_CMP_EQ, family, 0};
    seccomp_rule_add(ctx, SCMP_ACT_ALLOW, socket_nr, 1, first_argument);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || seccomp_load(ctx) != 0) {
    perror("seccomp");
    return 2;
  }
  fprintf(stderr, "seccomp_exec: %d system calls allowed\n", allowed);
  execvp(argv[3], argv + 3);
  perror(argv[3]);
  return 2;
}
