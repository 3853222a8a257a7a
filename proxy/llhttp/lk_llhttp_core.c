/* Compiles llhttp's llhttp.c from --with-llhttp=DIR (Debian node-llhttp). */
#include <llhttp.c>
